"""Journal rules: one fdatasync per group, no ack before its sync, torn tails cut."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
from pathlib import Path
from typing import cast

import crc32c
import pytest

from bookie.storage.journal import RESERVE_BYTES, GroupReport, Journal
from bookie.storage.journal_files import (
    HEADER_BYTES,
    JournalMark,
    crc_seed,
    file_header,
    journal_file,
    journal_files,
    recycled_files,
    replay,
)
from tests.unit.bookie.helpers import KEY, add, open_core, python_journal_writer, read_all
from walog.wire.durability import Durability
from walog.wire.status import Status

_FRAME = struct.Struct(">II")


def frames(path: Path) -> list[tuple[int, int]]:
    """(start, end) of every well-framed record of a journal file (independent parser)."""
    raw = path.read_bytes()
    spans = []
    offset = HEADER_BYTES
    while offset + _FRAME.size <= len(raw):
        length, _ = _FRAME.unpack_from(raw, offset)
        end = offset + _FRAME.size + length
        if length == 0 or end > len(raw):
            break  # reserved space, or a torn tail
        spans.append((offset, end))
        offset = end
    return spans


def _entries(report: GroupReport) -> set[tuple[int, int]]:
    """The (ledger, entry) pairs of a group's adds (tagged as (ledger, [entry ids]))."""
    tags = cast(list[tuple[int, list[int]]], report.tags)
    return {(ledger, entry) for ledger, entries in tags for entry in entries}


async def test_one_sync_per_group_and_no_ack_before_its_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python_journal_writer(monkeypatch)  # its os.fdatasync is the one counted
    real_fdatasync = os.fdatasync
    fdatasync_calls = 0

    def counting_fdatasync(fd: int) -> None:
        nonlocal fdatasync_calls
        fdatasync_calls += 1
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", counting_fdatasync)
    core = await open_core(tmp_path, group_wait_s=0.005)
    events: list[tuple[str, object]] = []

    def on_group(report: GroupReport, error: BaseException | None) -> None:
        assert error is None
        events.append(("group", report))

    core.journal.listeners.append(on_group)

    async def acked_add(entry_id: int) -> None:
        status, _ = await add(core, 1, entry_id)
        assert status is Status.OK
        events.append(("ack", (1, entry_id)))

    adds = 200
    await asyncio.gather(*(acked_add(e) for e in range(adds)))
    await core.close()

    groups = [report for kind, report in events if kind == "group"]
    assert isinstance(groups[0], GroupReport)
    assert fdatasync_calls == core.stats.journal_syncs
    data_groups = [g for g in groups if isinstance(g, GroupReport) and g.record_count]
    # Every group held a PERSISTENT record, so each was synced exactly once ...
    assert all(g.synced for g in data_groups)
    assert [g.sync_no for g in data_groups] == sorted({g.sync_no for g in data_groups})
    # ... and group commit shared syncs between adds.
    assert len(data_groups) < adds / 2
    # Each ack comes after the report of the synced group that holds its entry.
    seen: set[object] = set()
    for kind, value in events:
        if kind == "group":
            assert isinstance(value, GroupReport)
            if value.synced:
                seen.update(_entries(value))
        else:
            assert value in seen, f"entry {value} acknowledged before its group was synced"


async def test_volatile_adds_alone_never_sync_but_force_does(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    # The first write of a ledger persists its master key (one sync).
    assert (await add(core, 1, 0, durability=Durability.VOLATILE))[0] is Status.OK
    syncs = core.stats.journal_syncs
    results = await asyncio.gather(
        *(add(core, 1, e, durability=Durability.VOLATILE) for e in range(1, 50))
    )
    assert all(status is Status.OK for status, _ in results)
    assert core.stats.journal_syncs == syncs
    assert core.last_add_synced(1) < 49
    status, last_add_synced = await core.force(1, b"wrong")
    assert status is Status.UNAUTHORIZED
    status, last_add_synced = await core.force(1, KEY)
    assert status is Status.OK
    assert last_add_synced == 49
    assert core.stats.journal_syncs == syncs + 1
    await core.close()


async def test_persistent_add_in_a_volatile_group_makes_the_group_sync(tmp_path: Path) -> None:
    # The PERSISTENT add goes first: its group waits (group_wait_s) and takes the VOLATILE
    # adds queued right behind it.
    core = await open_core(tmp_path, group_wait_s=0.2)
    await add(core, 1, 0, durability=Durability.VOLATILE)
    await add(core, 2, 0)
    reports: list[GroupReport] = []
    core.journal.listeners.append(lambda report, error: reports.append(report))
    syncs = core.stats.journal_syncs
    volatile = [add(core, 1, e, durability=Durability.VOLATILE) for e in range(1, 20)]
    await asyncio.gather(add(core, 2, 1), *volatile)
    (mixed,) = [r for r in reports if (2, 1) in _entries(r)]
    assert mixed.synced
    assert (1, 1) in _entries(mixed)
    assert core.stats.journal_syncs == syncs + 1
    # Every VOLATILE entry written up to that sync is covered by it.
    upto = reports[: reports.index(mixed) + 1]
    covered = [entry for r in upto for ledger, entry in _entries(r) if ledger == 1]
    assert core.last_add_synced(1) >= max(covered)
    await core.close()


async def test_replay_after_crash_keeps_every_acknowledged_entry(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(30):
        assert (await add(core, 5, entry_id))[0] is Status.OK
    await core.abandon()
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 5, 40)) == list(range(30))
    assert core.stats.replayed_records >= 30
    assert core.last_entry_id(5) == 29
    await core.close()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
async def test_torn_tail_is_cut_and_every_earlier_entry_kept(tmp_path: Path, damage: str) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(20):
        await add(core, 3, entry_id)
    await core.abandon()
    (_, path), *_ = journal_files(tmp_path / "journal")
    spans = frames(path)
    # spans[0] is the master key record; entry e is spans[e + 1].
    start, _ = spans[15]
    cut_at = start + 10
    if damage == "truncate":
        os.truncate(path, cut_at)
    else:
        raw = bytearray(path.read_bytes())
        raw[cut_at] ^= 0xFF
        path.write_bytes(bytes(raw))
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 3, 30)) == list(range(14))
    assert path.stat().st_size == start
    assert core.last_entry_id(3) == 13
    # The store keeps working after the cut.
    assert (await add(core, 3, 14))[0] is Status.OK
    await core.close()
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 3, 30)) == list(range(15))
    await core.close()


def test_replay_yields_nothing_past_a_short_header(tmp_path: Path) -> None:
    # A file without the file header (written before it existed): plain CRCs from byte 0.
    path = tmp_path / "000000000001.journal"
    good = b"\x04" + b"x" * 16
    frame = _FRAME.pack(len(good), crc32c.crc32c(good)) + good
    path.write_bytes(frame + frame + b"\x00\x00")
    records = list(replay(tmp_path, JournalMark(0, 0), 1024))
    assert [payload for payload, _ in records] == [good, good]
    assert records[-1][1] == JournalMark(1, 2 * len(frame))
    assert path.stat().st_size == 2 * len(frame)


async def test_journal_rolls_files_and_checkpoint_retires_old_ones(tmp_path: Path) -> None:
    core = await open_core(tmp_path, journal_file_bytes=4096)
    for entry_id in range(100):
        await add(core, 1, entry_id)
    rolled = len(journal_files(tmp_path / "journal"))
    assert rolled >= 3
    await core.checkpoint()
    assert len(journal_files(tmp_path / "journal")) == 1
    # Kept for reuse, up to four; the rest deleted.
    assert len(recycled_files(tmp_path / "journal")) == min(4, rolled - 1)
    await core.close()
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 1, 120)) == list(range(100))
    await core.close()


def _record(file_seq: int, payload: bytes) -> bytes:
    return _FRAME.pack(len(payload), crc32c.crc32c(payload, crc_seed(file_seq))) + payload


def test_a_record_is_valid_only_in_the_file_it_was_written_to(tmp_path: Path) -> None:
    good = b"\x04" + b"y" * 16
    first = journal_file(tmp_path, 1)
    first.write_bytes(file_header(1) + _record(1, good))
    # The same record under file 2's header: its CRC was seeded with sequence number 1.
    second = journal_file(tmp_path, 2)
    second.write_bytes(file_header(2) + _record(1, good))
    records = list(replay(tmp_path, JournalMark(0, 0), 1024))
    assert records == [(good, JournalMark(1, HEADER_BYTES + _FRAME.size + len(good)))]
    assert second.stat().st_size == HEADER_BYTES


def test_old_records_behind_the_new_ones_in_a_reused_file_are_not_replayed(
    tmp_path: Path,
) -> None:
    old = [b"\x04" + bytes([n]) * 16 for n in range(3)]
    journal_file(tmp_path, 1).write_bytes(file_header(1) + b"".join(_record(1, p) for p in old))
    # Reused as file 2: a new header and one new record of the same size over the first.
    journal_file(tmp_path, 1).rename(journal_file(tmp_path, 2))
    new = b"\x04" + b"n" * 16
    with open(journal_file(tmp_path, 2), "r+b") as handle:
        handle.write(file_header(2) + _record(2, new))
    assert [payload for payload, _ in replay(tmp_path, JournalMark(2, 0), 1024)] == [new]


def test_a_reused_file_whose_new_header_was_lost_holds_no_records(tmp_path: Path) -> None:
    # File 3 renamed to 5 for reuse, then a crash before its new header reached the disk:
    # header and records still say 3, so nothing in it is file 5's.
    good = b"\x04" + b"z" * 16
    journal_file(tmp_path, 5).write_bytes(file_header(3) + _record(3, good))
    assert list(replay(tmp_path, JournalMark(5, 0), 1024)) == []


async def test_reused_journal_files_never_replay_their_old_records(tmp_path: Path) -> None:
    core = await open_core(tmp_path, journal_file_bytes=4096)
    for entry_id in range(100):
        await add(core, 1, entry_id)
    await core.checkpoint()
    kept = len(recycled_files(tmp_path / "journal"))
    for entry_id in range(40):  # enough to roll onto reused files
        await add(core, 2, entry_id)
    assert len(recycled_files(tmp_path / "journal")) < kept
    await core.abandon()
    core = await open_core(tmp_path, journal_file_bytes=4096)
    # Only ledger 2's records (and its key) come back from the journal; ledger 1's old
    # records, still in the reused files behind the new ones, fail their CRC.
    assert core.stats.replayed_records == 41
    assert sorted(await read_all(core, 1, 120)) == list(range(100))
    assert sorted(await read_all(core, 2, 60)) == list(range(40))
    await core.close()


def test_journal_not_started_refuses_appends(tmp_path: Path) -> None:
    journal = Journal(
        tmp_path, file_bytes=1024, group_wait_s=0, group_max_bytes=1024, flush_interval_s=1
    )
    with pytest.raises(RuntimeError):
        journal.append((b"x",), sync=False)


async def test_barrier_mark_lies_before_records_queued_after_it_in_the_same_group(
    tmp_path: Path,
) -> None:
    journal = Journal(
        tmp_path, file_bytes=1 << 20, group_wait_s=0.2, group_max_bytes=1 << 20, flush_interval_s=1
    )
    await journal.start(1)
    before = journal.append((b"\x04before",), sync=True)
    mark = journal.barrier()
    after = journal.append((b"\x04after",), sync=True)
    assert before is not None and after is not None
    first, position, last = await asyncio.gather(before, mark, after)
    await journal.stop()
    # All three shared one group (the test needs that) ...
    assert first.group_no == last.group_no
    # ... yet the barrier's mark splits it: replay from the mark sees only the later record.
    assert position == JournalMark(1, HEADER_BYTES + _FRAME.size + len(b"\x04before"))
    assert [payload for payload, _ in replay(tmp_path, position, 1024)] == [b"\x04after"]


async def test_background_flush_syncs_volatile_entries(tmp_path: Path) -> None:
    core = await open_core(tmp_path, volatile_flush_interval_s=1.0)
    await add(core, 1, 0, lac=-1, durability=Durability.VOLATILE)
    reports: asyncio.Queue[GroupReport] = asyncio.Queue()
    core.journal.listeners.append(lambda report, error: reports.put_nowait(report))
    for entry_id in range(1, 10):
        await add(core, 1, entry_id, lac=-1, durability=Durability.VOLATILE)
    timer_syncs = 0
    while core.last_add_synced(1) < 9:
        report = await asyncio.wait_for(reports.get(), 15)
        timer_syncs += report.synced  # nothing asked for a sync: the flush timer did it
    assert timer_syncs >= 1
    await core.close()


async def test_without_group_wait_records_queued_during_a_sync_form_the_next_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # group_wait_s=0: a lone record is written and synced at once; whatever arrives while
    # that sync runs is committed together afterwards, with one more sync.
    python_journal_writer(monkeypatch)  # its os.fdatasync is the one held
    real_fdatasync = os.fdatasync
    in_sync = threading.Event()
    release = threading.Event()
    syncs = 0

    def held_fdatasync(fd: int) -> None:
        nonlocal syncs
        syncs += 1
        if syncs == 1:
            in_sync.set()
            release.wait(30)
        real_fdatasync(fd)

    journal = Journal(
        tmp_path, file_bytes=1 << 20, group_wait_s=0, group_max_bytes=1 << 20, flush_interval_s=1
    )
    await journal.start(1)
    monkeypatch.setattr(os, "fdatasync", held_fdatasync)
    lone = journal.append((b"\x04lone",), sync=True, tag="lone")
    assert lone is not None
    await asyncio.to_thread(in_sync.wait, 30)
    later = [journal.append((b"\x04later%d" % i,), sync=True, tag=i) for i in range(3)]
    release.set()
    reports = await asyncio.gather(lone, *(f for f in later if f is not None))
    await journal.stop()
    assert reports[0].tags == ["lone"] and reports[0].synced
    assert all(r.group_no == reports[1].group_no for r in reports[1:])
    assert reports[1].group_no == reports[0].group_no + 1
    assert reports[1].tags == [0, 1, 2] and reports[1].synced
    assert syncs == 2


async def test_a_journal_file_reserves_space_ahead_of_its_writes_and_replay_stops_at_the_zeros(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(10):
        await add(core, 4, entry_id)
    await core.abandon()  # as after SIGKILL: no checkpoint, the journal holds everything
    (_, path), *_ = journal_files(tmp_path / "journal")
    written = frames(path)[-1][1]
    assert path.stat().st_size > RESERVE_BYTES > written
    assert path.stat().st_blocks * 512 >= RESERVE_BYTES  # reserved on disk, not a hole
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 4, 20)) == list(range(10))
    assert path.stat().st_size == written  # replay released the unwritten space
    await core.close()
