"""Leader *suggestion* over a metadata store, with a strictly increasing epoch per term.

A candidate leads while it holds the liveness-bound record ``/elections/<name>/leader``.
Leadership here is only a suggestion of who should act: a paused process can still believe
it leads after its session expired and another candidate won (docs/protocol.md, "Leader
suggestion"). Correctness must
come from fencing the shared resource with the epoch: a resource accepts a request only if
its epoch is at least the highest it has seen, and walog ledgers are fenced by recovery
anyway. Each term's epoch is taken from the per-election counter after the record is won,
so every winner gets a larger epoch than every earlier winner.

The record holds ``{"format", "candidate", "token", "epoch"}`` at version 1 for the whole
term (``"format"``: :data:`ELECTION_RECORD_FORMAT`; a record without it is format 1). Any
other state of the record (gone, another candidate, or re-created by the store after a
session expiry, which gives version 0) ends the term: :attr:`Leadership.lost` is set and
the record, if still ours, is removed so that others can win.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable

from walog._tasks import cancel_and_wait
from walog.errors import MetadataConflictError, MetadataError, NewerFormatError
from walog.format_versions import check_version
from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError
from walog.metadata.uri import check_counter

log = logging.getLogger(__name__)

ELECTIONS = "/elections"
ELECTION_RECORD_FORMAT = 1
"""The format version of the leader records this walog writes, and the newest it reads."""


def leader_path(name: str) -> str:
    """Path of the leader record of election ``name``."""
    return f"{ELECTIONS}/{check_counter(name)}/leader"


def epoch_counter(name: str) -> str:
    """Name of the counter that hands out the epochs of election ``name``."""
    return f"election-epoch-{check_counter(name)}"


class Leadership:
    """One term of leadership won by :func:`elect`.

    Attributes:
        name: the election.
        candidate_id: this candidate.
        epoch: strictly larger than the epoch of every earlier term of this election.
        lost: set once the term is over (record lost, :meth:`resign`, or store closed).
    """

    def __init__(
        self,
        store: MetadataStore,
        name: str,
        candidate_id: str,
        epoch: int,
        record: bytes,
        changed: asyncio.Event,
        unwatch: Callable[[], None],
    ) -> None:
        self.name = name
        self.candidate_id = candidate_id
        self.epoch = epoch
        self.lost = asyncio.Event()
        self._store = store
        self._record = record
        self._changed = changed
        self._unwatch = unwatch
        self._monitor = asyncio.create_task(self._watch_term(), name=f"leadership-{name}")

    @property
    def is_leader(self) -> bool:
        """True until the term is known to be over (a suggestion, see the module doc)."""
        return not self.lost.is_set()

    async def wait_lost(self) -> None:
        """Return once the term is over."""
        await self.lost.wait()

    async def _still_ours(self) -> bool:
        try:
            data, version = await self._store.get(leader_path(self.name))
        except NodeNotFoundError:
            return False
        return version == 1 and data == self._record

    async def _watch_term(self) -> None:
        path = leader_path(self.name)
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                if not await self._still_ours():
                    break
            except MetadataError as exc:
                # Unreachable store: the record decides once it answers again (stores
                # call their watches after reconnecting).
                log.warning("leadership %s of %s unverified: %s", self.epoch, path, exc)
        log.warning("lost leadership of %s (epoch %d)", path, self.epoch)
        await self._end()

    async def _end(self) -> None:
        self.lost.set()
        self._unwatch()
        with contextlib.suppress(MetadataError):
            # Removes the record only while this store's session owns it.
            await self._store.unregister(leader_path(self.name))

    async def resign(self) -> None:
        """End the term now and let another candidate win."""
        if self.lost.is_set():
            return
        await cancel_and_wait(self._monitor)
        await self._end()


async def elect(store: MetadataStore, name: str, candidate_id: str) -> Leadership:
    """Wait until ``candidate_id`` leads election ``name``; return the term.

    The term is bound to the store's liveness (its session): it ends when the record is
    lost. Cancel the call to stop campaigning.

    Raises:
        ValueError: ``name`` is empty or contains ``/``.
        walog.errors.MetadataError: the store failed.
    """
    path = leader_path(name)
    token = uuid.uuid4().hex
    claimed = {"format": ELECTION_RECORD_FORMAT, "candidate": candidate_id, "token": token}
    claim = json.dumps(claimed).encode()
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def notify() -> None:  # any thread
        loop.call_soon_threadsafe(changed.set)

    unwatch = store.watch(path, notify)
    try:
        while True:
            changed.clear()  # before trying: a change racing with the attempt is kept
            try:
                await store.register(path, claim)
            except NodeExistsError:
                await changed.wait()
                continue
            try:
                epoch = await store.next_id(epoch_counter(name))
                record = json.dumps({**claimed, "epoch": epoch}).encode()
                await store.set(path, record, 0)
                break
            except (NodeNotFoundError, MetadataConflictError):
                # The record was lost before the epoch was recorded: campaign again.
                await store.unregister(path)
    except BaseException:
        unwatch()
        with contextlib.suppress(MetadataError):
            await store.unregister(path)
        raise
    # ``changed`` stays as it is: the monitor checks the record once on start.
    return Leadership(store, name, candidate_id, epoch, record, changed, unwatch)


async def current_leader(store: MetadataStore, name: str) -> tuple[str, int] | None:
    """``(candidate_id, epoch)`` of the current term, or None while nobody leads.

    Raises:
        NewerFormatError: the leader record's format is newer than
            :data:`ELECTION_RECORD_FORMAT` (the message names the election and both
            versions).
        ValueError: the record is damaged.
    """
    try:
        data, version = await store.get(leader_path(name))
    except NodeNotFoundError:
        return None
    if version < 1:
        return None  # won, epoch not yet recorded (or a stale re-created record)
    return leader_of(data, name)


def leader_of(record: bytes, name: str) -> tuple[str, int]:
    """``(candidate_id, epoch)`` from the leader record of election ``name``.

    Raises:
        NewerFormatError: as :func:`current_leader`.
        ValueError: the record is damaged.
    """
    what = f"election {name!r}'s leader record"
    try:
        doc = json.loads(record)
        found = doc.get("format", 1)
        check_version(what, found, ELECTION_RECORD_FORMAT, ValueError, newer=NewerFormatError)
        return str(doc["candidate"]), int(doc["epoch"])
    except (TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{what} is damaged: {exc!r}") from exc


__all__ = [
    "ELECTIONS",
    "ELECTION_RECORD_FORMAT",
    "Leadership",
    "current_leader",
    "elect",
    "epoch_counter",
    "leader_of",
    "leader_path",
]
