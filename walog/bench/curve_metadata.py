"""Metadata calls per roll, per takeover and per retention pass, against the log's length
(``walog bench --only curve-metadata``).

The client's metadata store is wrapped in a :class:`CountingStore`, which counts every
call by kind and the record bytes read and written. A log grows by rolls (one record
each) to 10, 100 and 1,000 ledgers, in a cluster with :data:`OTHER_LEDGERS` ledgers
outside the log; at each length one roll, one takeover (a second client opens a writer,
which fences the first) and three retention passes (a client's first and next pass that
delete nothing, one that deletes the head ledger) are counted. Calls must stay constant in
the length; the bytes are shown too, since the log's ledger list is one record.
"""

from __future__ import annotations

import collections
import contextlib
import uuid
from collections.abc import Callable, Sequence

import walog.aio
from walog.bench.curves import Curve
from walog.bench.scenarios import ENSEMBLE
from walog.errors import WalogError
from walog.log.retention import RetentionPolicy
from walog.log.truncation import enforce_retention
from walog.log.writer import AsyncLogWriter
from walog.metadata.store import MetadataStore, WatchCallback

LENGTHS = (10, 100, 1000)
"""Ledgers in the log at the measured points."""

OTHER_LEDGERS = 100
"""Ledgers outside the log, made before it."""

RECORD = b"r" * 100


class CountingStore(MetadataStore):
    """A metadata store that counts the calls made through it (and passes them on).

    Attributes:
        calls: calls by method name since the last :meth:`reset`.
        bytes_read: record bytes ``get`` returned.
        bytes_written: record bytes ``create`` and ``set`` sent.
    """

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()
        self.bytes_read = 0
        self.bytes_written = 0

    def reset(self) -> None:
        """Start counting from zero."""
        self.calls.clear()
        self.bytes_read = self.bytes_written = 0

    @property
    def total(self) -> int:
        """Calls of every kind since the last reset."""
        return sum(self.calls.values())

    async def get(self, path: str) -> tuple[bytes, int]:
        """Counted :meth:`MetadataStore.get`."""
        self.calls["get"] += 1
        data, version = await self.inner.get(path)
        self.bytes_read += len(data)
        return data, version

    async def exists(self, path: str) -> int | None:
        """Counted :meth:`MetadataStore.exists`."""
        self.calls["exists"] += 1
        return await self.inner.exists(path)

    async def sync(self, path: str) -> None:
        """Counted :meth:`MetadataStore.sync`."""
        self.calls["sync"] += 1
        await self.inner.sync(path)

    async def create(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        """Counted :meth:`MetadataStore.create`."""
        self.calls["create"] += 1
        self.bytes_written += len(data)
        return await self.inner.create(path, data, make_parents=make_parents)

    async def set(self, path: str, data: bytes, version: int) -> int:
        """Counted :meth:`MetadataStore.set`."""
        self.calls["set"] += 1
        self.bytes_written += len(data)
        return await self.inner.set(path, data, version)

    async def delete(self, path: str, version: int = -1) -> None:
        """Counted :meth:`MetadataStore.delete`."""
        self.calls["delete"] += 1
        await self.inner.delete(path, version)

    async def children(self, path: str) -> list[str]:
        """Counted :meth:`MetadataStore.children`."""
        self.calls["children"] += 1
        return await self.inner.children(path)

    async def next_id(self, counter: str) -> int:
        """Counted :meth:`MetadataStore.next_id`."""
        self.calls["next_id"] += 1
        return await self.inner.next_id(counter)

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        """Counted :meth:`MetadataStore.watch`."""
        self.calls["watch"] += 1
        return self.inner.watch(path, callback)

    async def register(self, path: str, data: bytes) -> None:
        """Counted :meth:`MetadataStore.register`."""
        self.calls["register"] += 1
        await self.inner.register(path, data)

    async def unregister(self, path: str) -> None:
        """Counted :meth:`MetadataStore.unregister`."""
        self.calls["unregister"] += 1
        await self.inner.unregister(path)

    def on_session_expired(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Passed on uncounted (no call to the store)."""
        return self.inner.on_session_expired(callback)

    async def close(self) -> None:
        """Close the wrapped store."""
        await self.inner.close()


async def counting_client(uri: str) -> tuple[walog.aio.AsyncClient, CountingStore]:
    """A client whose metadata calls go through a :class:`CountingStore`."""
    client = await walog.aio.connect(uri)
    store = CountingStore(client.ctx.store)
    client.ctx.store = store
    return client, store


def _kinds(calls: collections.Counter[str]) -> str:
    return " ".join(f"{name} {count}" for name, count in sorted(calls.items()))


async def _roll(writer: AsyncLogWriter) -> None:
    """One record, one roll, and what runs after it (closing the old ledger, retention)."""
    await writer.append(RECORD)
    await writer.roll()
    await writer.wait_retention()


async def metadata_per_operation(
    uri: str,
    lengths: Sequence[int] = LENGTHS,
    others: int = OTHER_LEDGERS,
    progress: Callable[[int], None] = lambda _: None,
) -> tuple[Curve, dict[str, dict[int, str]]]:
    """Measure the curve, with ``others`` ledgers outside the log made before it; also
    return the calls by kind (operation -> length -> text)."""
    curve = Curve(
        name="curve-metadata",
        title="Metadata calls per roll, takeover and retention pass, by log length",
        columns=[
            "ledgers in the log",
            "calls per roll",
            "calls per takeover",
            "calls, a client's first retention pass",
            "calls per retention pass, nothing deleted",
            "calls per retention pass, head deleted",
            "KB per roll",
            "KB per takeover",
            "other ledgers in the cluster",
        ],
        plot=[
            ("calls per roll", "metadata calls"),
            ("calls per takeover", "metadata calls"),
            ("calls, a client's first retention pass", "metadata calls"),
            ("calls per retention pass, nothing deleted", "metadata calls"),
            ("calls per retention pass, head deleted", "metadata calls"),
            ("KB per roll", "KB read + written"),
            ("KB per takeover", "KB read + written"),
        ],
    )
    kinds: dict[str, dict[int, str]] = {
        "roll": {},
        "takeover": {},
        "retention pass, nothing deleted": {},
        "retention pass, head deleted": {},
    }
    name = f"bench-metadata-{uuid.uuid4().hex[:8]}"
    clients: list[walog.aio.AsyncClient] = []
    try:
        client, store = await counting_client(uri)
        clients.append(client)
        # Ledgers outside the log, made before it: a client's first retention pass reads
        # each once (looking for sink ledgers), whatever the log's length.
        for _ in range(others):
            await (await client.create_ledger(*ENSEMBLE)).close()
        log = await client.open_log(name)
        writer = await log.open_writer()
        for length in lengths:
            while len((await log.metadata()).ledgers) < length:
                await _roll(writer)
                progress(1)
            store.reset()
            await _roll(writer)
            roll_calls, roll_kb = store.total, (store.bytes_read + store.bytes_written) / 1e3
            kinds["roll"][length] = _kinds(store.calls)
            # Takeover: a second client's writer fences this one; it writes on from there.
            taker, taker_store = await counting_client(uri)
            clients.append(taker)
            taker_log = await taker.open_log(name)
            taker_store.reset()
            new_writer = await taker_log.open_writer()
            takeover_calls = taker_store.total
            takeover_kb = (taker_store.bytes_read + taker_store.bytes_written) / 1e3
            kinds["takeover"][length] = _kinds(taker_store.calls)
            with contextlib.suppress(WalogError):
                await writer.close()  # fenced: closes quietly
            writer, store, log = new_writer, taker_store, taker_log
            others = len(set(await taker.list_ledgers()) - set((await log.metadata()).ledger_ids))
            passes = []
            for _ in range(2):  # a client's first pass, then its next
                store.reset()
                await enforce_retention(taker, name, RetentionPolicy())
                passes.append(store.total)
            kinds["retention pass, nothing deleted"][length] = _kinds(store.calls)
            # Sizes of ledgers a takeover recovered are measured first: not counted.
            await enforce_retention(taker, name, RetentionPolicy(max_bytes=1 << 60))
            sizes = [i.size_bytes or 0 for i in (await log.metadata()).ledgers if i.is_closed]
            store.reset()
            await enforce_retention(taker, name, RetentionPolicy(max_bytes=sum(sizes[1:])))
            passes.append(store.total)
            kinds["retention pass, head deleted"][length] = _kinds(store.calls)
            curve.rows.append(
                [
                    length,
                    roll_calls,
                    takeover_calls,
                    *passes,
                    round(roll_kb, 1),
                    round(takeover_kb, 1),
                    others,
                ]
            )
            progress(1)
        await writer.close()
    finally:
        for one in clients:
            await one.close()
    counts = [row[1:5] for row in curve.rows]
    curve.holds = all(row == counts[0] for row in counts)
    curve.bound = (
        "the calls of each operation are the same at every length (constant in the log's length)."
    )
    return curve, kinds


__all__ = ["LENGTHS", "CountingStore", "counting_client", "metadata_per_operation"]
