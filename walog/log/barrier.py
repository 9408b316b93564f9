"""The read barrier of a log: a position at or past every record acknowledged before the
call, found without fencing and without asking the writer (docs/linearizable-reads.md).

1. Read the log's record with a linearizable read of the metadata store (ZooKeeper:
   ``sync``, then read; SQLite reads are current anyway). Every ledger holding a record
   acknowledged before the call is listed: the writer acknowledges nothing in a ledger
   before the log's record lists it, nor in a fragment before the ledger's metadata names
   it (the simulator's rule ``ack_unnamed``).
2. The last listed ledger's stored tail (walog.ledger.tail): the highest entry stored by
   enough bookies of its last fragment to cover every write quorum, read without the fence
   flag; entry ``e``. A CLOSED ledger's tail is its last entry.
3. The barrier is the position just after entry ``e``'s last record (its slot count comes
   from the entry itself): ``Position(ledger, e, records in e)``; ``Position(ledger, 0, 0)``
   for an empty ledger.
4. Before returning, wait until the LAC reaches ``e`` or the ledger closes, so a reader can
   read up to the barrier. A ledger closed meanwhile at an entry before ``e`` (recovery
   dropped entries nobody acknowledged) has its barrier at its own last entry.

Earlier ledgers are CLOSED and before the last one; a ledger listed after step 1 holds no
record acknowledged before the call. The barrier never goes past what a reader can read once
the call returned.
"""

from __future__ import annotations

import asyncio

from walog import mutations
from walog.ledger.tail import StoredTail
from walog.log.ledgers import LedgerClientLike, LedgerReaderLike
from walog.log.log_metadata import read_log
from walog.log.position import Position, ledger_start, unchecked_position
from walog.log.records import decode_records
from walog.metadata.layout import log_path

DEFAULT_BARRIER_TIMEOUT_S = 30.0
"""How long :func:`read_barrier` waits, by default, for the LAC to reach the tail."""


async def read_barrier(
    client: LedgerClientLike,
    name: str,
    *,
    password: bytes = b"",
    timeout: float = DEFAULT_BARRIER_TIMEOUT_S,  # noqa: ASYNC109
) -> Position:
    """A position ``p`` of log ``name`` such that every record acknowledged (to any
    writer's caller) before this call began lies before ``p``, and every record before
    ``p`` is readable once the call returned.

    Raises:
        ValueError: ``timeout`` is negative.
        NoSuchLogError: the log does not exist.
        BookieUnavailableError: too few bookies of the last ledger answered.
        TimeoutError: the last add confirmed did not reach the tail within ``timeout``
            seconds (its writer stalls or died, and nobody recovered the ledger yet).
    """
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
    store = client.ctx.store
    await store.sync(log_path(name))
    meta, _ = await read_log(store, name)
    if not meta.ledgers:
        return Position(0, 0, 0)
    ledger_id = meta.ledgers[-1].ledger_id
    handle = await client.open_ledger(ledger_id, recovery=False, password=password)
    try:
        return await _barrier_in(handle, timeout)
    finally:
        await handle.close()


async def _barrier_in(handle: LedgerReaderLike, timeout: float) -> Position:  # noqa: ASYNC109
    if mutations.enabled("barrier_stops_at_lac"):
        tail = StoredTail(await handle.read_last_add_confirmed(), None)
    else:
        tail = await handle.read_stored_tail()
    last = tail.entry_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # The answers that bounded the tail told the handle their LAC: when it reaches the tail
    # already (an idle writer's explicit LAC) there is nothing to wait for.
    while handle.last_add_confirmed < last and not handle.is_closed:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(
                f"ledger {handle.ledger_id}: the last add confirmed stayed at "
                f"{handle.last_add_confirmed}, short of entry {last} that its bookies store, "
                f"for {timeout} seconds (its writer stalls or died; a takeover recovers it)"
            )
        await handle.wait_last_add_confirmed(handle.last_add_confirmed, remaining)
    if handle.is_closed:
        last = min(last, handle.last_add_confirmed)
    if last < 0:
        return ledger_start(handle.ledger_id)
    if tail.entry is not None and tail.entry.entry_id == last:
        data = tail.entry.data
    else:
        data = (await handle.read(last, last))[0].data
    return unchecked_position(handle.ledger_id, last, len(decode_records(data)))


__all__ = ["DEFAULT_BARRIER_TIMEOUT_S", "read_barrier"]
