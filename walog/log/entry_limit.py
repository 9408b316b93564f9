"""A log's record size limit against the client's and the bookies' (docs/logs.md, "Record
size").

A log's writer makes entries of at most the log's ``max_entry_bytes``. At open it checks
that limit against the client's (``ClientConfig.max_entry_bytes``) and against the one
every available bookie announces in its registration (``--max-entry-bytes``), and refuses
to open with a larger one: otherwise its large records would be refused one by one, at the
client or at a bookie. The rule (:func:`entry_limit_problem`) is pure; the bookies'
announcements are read by :func:`walog.ledger.ensemble.announced_entry_limits`.

A bookie that refuses an entry as over its own limit stops that ledger's writer; the log's
writer then packs the records not acknowledged yet again, in their order, into entries within
the bookie's limit (:func:`repack`, pure as well) and sends them to the next ledger: only a
record that no such entry holds fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from walog.errors import RecordTooLargeError
from walog.ledger.ensemble import announced_entry_limits
from walog.log.ledgers import LedgerClientLike
from walog.log.records import (
    FORMAT_VERSION,
    HEADER_BYTES,
    RECORD_OVERHEAD_BYTES,
    TAGGED_FORMAT_VERSION,
    Tag,
    decode_tagged,
    new_batch,
    producer_prefix,
)

T = TypeVar("T")


def entry_limit_problem(
    name: str, wanted: int, client_limit: int, announced: Mapping[str, int]
) -> str | None:
    """Why log ``name`` cannot make entries of ``wanted`` bytes, or None when it can: the
    client sends at most ``client_limit`` bytes, and each bookie of ``announced`` stores at
    most its limit."""
    fix = f"lower the log's limit ('walog log config {name} --set max_entry_bytes=N')"
    if wanted > client_limit:
        return (
            f"log {name!r} makes entries of up to max_entry_bytes={wanted} bytes, but this "
            f"client sends at most ClientConfig.max_entry_bytes={client_limit}: {fix} or "
            "raise the client's"
        )
    smaller = {bookie: limit for bookie, limit in announced.items() if limit < wanted}
    if smaller:
        bookie = min(smaller, key=lambda b: (smaller[b], b))
        return (
            f"log {name!r} makes entries of up to max_entry_bytes={wanted} bytes, but bookie "
            f"{bookie} stores at most {smaller[bookie]} (its --max-entry-bytes"
            + (f"; {len(smaller) - 1} other bookies are below it too" if len(smaller) > 1 else "")
            + f"): {fix} or raise the bookies'"
        )
    return None


async def check_entry_limit(client: LedgerClientLike, name: str, max_entry_bytes: int) -> None:
    """Refuse a writer of log ``name`` whose entries (up to ``max_entry_bytes``) the client
    or an available bookie would refuse.

    Raises:
        ValueError: naming the smaller limit and the fix.
    """
    announced = await announced_entry_limits(client.ctx.store)
    problem = entry_limit_problem(
        name, max_entry_bytes, client.ctx.config.max_entry_bytes, announced
    )
    if problem is not None:
        raise ValueError(problem)


def record_too_large(
    name: str,
    size: int,
    max_entry_bytes: int,
    *,
    refusal: RecordTooLargeError | None = None,
    largest: int | None = None,
) -> RecordTooLargeError:
    """The error of a record of ``size`` bytes that no entry of ``max_entry_bytes`` holds;
    ``refusal`` is the bookie's refusal that lowered the limit to ``max_entry_bytes``, if one
    did; ``largest``: the largest payload such an entry holds, when not that of a record
    without a producer (a producer's name and seq take room too)."""
    if largest is None:
        largest = max_entry_bytes - HEADER_BYTES - RECORD_OVERHEAD_BYTES
    why = "" if refusal is None else f", a bookie's limit: {refusal}"
    error = RecordTooLargeError(
        f"log {name!r}: a record of {size} bytes is over the largest one an entry holds, "
        f"{largest} bytes (max_entry_bytes={max_entry_bytes} less {max_entry_bytes - largest} "
        f"of record format{why}); the record was not appended, the writer goes on",
        size=size,
        limit=largest,
    )
    error.__cause__ = refusal
    return error


@dataclasses.dataclass(frozen=True, slots=True)
class Repacked(Generic[T]):
    """Records packed again into smaller entries (:func:`repack`).

    Attributes:
        entries: the new entries in record order: each one's bytes, its size and what came
            with its records (in slot order).
        too_large: the records no entry holds alone, in record order: each one's payload
            size and what came with it.
    """

    entries: list[tuple[bytes, int, list[T]]]
    too_large: list[tuple[int, T]]


def unpack(entries: Iterable[tuple[bytes, list[T]]]) -> list[tuple[float, bytes, T, Tag]]:
    """The records of ``entries`` (each an entry's bytes and its records' companions, in
    slot order), as :func:`repack` takes them: their producers and seqs too."""
    return [
        (timestamp, data, companion, tag)
        for payload, companions in entries
        for (timestamp, data, tag), companion in zip(
            decode_tagged(payload), companions, strict=True
        )
    ]


def repack(
    records: Iterable[tuple[float, bytes, T] | tuple[float, bytes, T, Tag]],
    max_entry_bytes: int,
    max_records: int,
) -> Repacked[T]:
    """Pack ``(timestamp, payload, companion)`` records (with a fourth item, its producer
    and seq, for a record of a producer session), in their order, into entries of at
    most ``max_entry_bytes`` bytes and ``max_records`` records; a record that no such entry
    holds alone goes to :attr:`Repacked.too_large` instead, and the records around it keep
    their order. The entries of the log's writer are made the same way
    (walog.log.records.RecordBatch), so no entry passes a limit the writer's own would not;
    they are of format 2 when any record has a producer.

    Raises:
        ValueError: ``max_entry_bytes`` or ``max_records`` leaves no room for a record.
    """
    listed = list(records)
    tagged = any(len(record) > 3 and record[3] is not None for record in listed)
    version = TAGGED_FORMAT_VERSION if tagged else FORMAT_VERSION
    batch = new_batch(max_entry_bytes, max_records, version)
    entries: list[tuple[bytes, int, list[T]]] = []
    too_large: list[tuple[int, T]] = []
    companions: list[T] = []
    for record in listed:
        timestamp, payload, companion = record[0], record[1], record[2]
        tag = record[3] if len(record) > 3 else None
        prefix = b"" if tag is None else producer_prefix(tag[0])
        largest = batch.max_payload_bytes if tag is None else batch.max_tagged_payload_bytes(prefix)
        if len(payload) > largest:
            too_large.append((len(payload), companion))
            continue
        fits = batch.fits(len(payload)) if tag is None else batch.fits_tagged(len(payload), prefix)
        if not fits:
            entries.append((batch.encode(), batch.size, companions))
            batch, companions = new_batch(max_entry_bytes, max_records, version), []
        if tag is None:
            batch.add(timestamp, payload)
        else:
            batch.add_tagged(timestamp, payload, prefix, tag[1])
        companions.append(companion)
    if companions:
        entries.append((batch.encode(), batch.size, companions))
    return Repacked(entries, too_large)


__all__ = [
    "Repacked",
    "check_entry_limit",
    "entry_limit_problem",
    "record_too_large",
    "repack",
    "unpack",
]
