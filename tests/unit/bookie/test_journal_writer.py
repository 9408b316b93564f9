"""The journal's writer thread, compiled (bookie/storage/_fastjournal.c) and pure Python
(:class:`bookie.storage.journal_writer.ThreadWriter`): the same bytes in the file, the same groups,
the same failures.

Each test queues its jobs first and then runs the writer's loop in the test's own thread
after ``stop()``: it writes what is queued and returns, so what forms a group does not
depend on timing. The compiled writer must be built here (``pip install -e .``): these
tests fail, not skip, when it is not.
"""

from __future__ import annotations

import errno
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bookie.storage import fastpath
from bookie.storage.journal_files import (
    FRAME,
    HEADER_BYTES,
    JournalMark,
    crc_seed,
    file_header,
    journal_file,
    replay,
)
from bookie.storage.journal_writer import JournalWriter, ThreadWriter
from tests.unit.bookie.helpers import compiled_journal_module, probe_pure_python

MakeWriter = Callable[[int, float], JournalWriter]


def _compiled(group_max_bytes: int, group_wait_s: float) -> JournalWriter:
    writer: JournalWriter = compiled_journal_module().Writer(group_max_bytes, group_wait_s)
    return writer


WRITERS = [pytest.param(_compiled, id="compiled"), pytest.param(ThreadWriter, id="python")]


def _drain(writer: JournalWriter, abandon: bool = False) -> list[tuple[int, int, bool]]:
    """Run the writer over what is queued; (group, errno, synced) of every job."""
    writer.stop(abandon)
    writer.run()
    return [(group, error, bool(synced)) for group, error, synced, *_ in writer.collect()]


@pytest.mark.parametrize("make", WRITERS)
def test_jobs_are_framed_with_their_seed_and_written_in_order(
    make: MakeWriter, tmp_path: Path
) -> None:
    path = journal_file(tmp_path, 7)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, file_header(7))
    writer = make(1 << 20, 0.0)
    seed = crc_seed(7)
    records = [(b"\x04one",), (b"\x04tw", b"o"), (b"\x04" + bytes(range(256)) * 40,)]
    for parts in records:
        writer.submit(fd, seed, parts, False)
    writer.submit(fd, seed, (), True)  # a sync alone writes nothing
    assert _drain(writer) == [(1, 0, True)] * 4
    os.close(fd)
    framed = sum(FRAME.size + sum(map(len, parts)) for parts in records)
    assert path.stat().st_size == HEADER_BYTES + framed
    replayed = [payload for payload, _ in replay(tmp_path, JournalMark(7, 0), 1 << 20)]
    assert replayed == [b"".join(parts) for parts in records]


@pytest.mark.parametrize("make", WRITERS)
def test_compiled_and_python_writers_write_the_same_bytes(make: MakeWriter, tmp_path: Path) -> None:
    expected = tmp_path / "expected"
    fd = os.open(expected, os.O_WRONLY | os.O_CREAT, 0o644)
    reference = ThreadWriter(1 << 20, 0.0)
    jobs = [(crc_seed(3), (bytes([n]) * n, b"tail")) for n in range(1, 200, 7)]
    for seed, parts in jobs:
        reference.submit(fd, seed, parts, False)
    _drain(reference)
    os.close(fd)
    got = tmp_path / "got"
    fd = os.open(got, os.O_WRONLY | os.O_CREAT, 0o644)
    writer = make(1 << 20, 0.0)
    for seed, parts in jobs:
        writer.submit(fd, seed, parts, False)
    _drain(writer)
    os.close(fd)
    assert got.read_bytes() == expected.read_bytes()


@pytest.mark.parametrize("make", WRITERS)
def test_a_group_holds_consecutive_jobs_of_one_file_up_to_its_byte_limit(
    make: MakeWriter, tmp_path: Path
) -> None:
    first = os.open(tmp_path / "first", os.O_WRONLY | os.O_CREAT, 0o644)
    second = os.open(tmp_path / "second", os.O_WRONLY | os.O_CREAT, 0o644)
    writer = make(100, 0.0)
    for fd, size, sync in [
        (first, 60, False),
        (first, 60, True),  # 136 bytes framed: the group is full once it holds this one
        (first, 60, False),
        (second, 1, True),  # another file: another group
        (second, 1, False),
    ]:
        writer.submit(fd, 0, (b"x" * size,), sync)
    assert _drain(writer) == [
        (1, 0, True),
        (1, 0, True),
        (2, 0, False),
        (3, 0, True),
        (3, 0, True),
    ]
    os.close(first)
    os.close(second)


@pytest.mark.parametrize("make", WRITERS)
def test_a_failed_write_fails_its_group_and_every_later_job_without_writing(
    make: MakeWriter, tmp_path: Path
) -> None:
    good = os.open(tmp_path / "good", os.O_WRONLY | os.O_CREAT, 0o644)
    read_only = os.open(tmp_path / "good", os.O_RDONLY)
    writer = make(1 << 20, 0.0)
    writer.submit(good, 0, (b"\x04before",), True)
    writer.submit(read_only, 0, (b"\x04refused",), True)
    writer.submit(good, 0, (b"\x04after",), True)
    results = _drain(writer)
    assert results[0] == (1, 0, True)
    assert [error for _, error, _ in results[1:]] == [errno.EBADF, errno.EBADF]
    assert not any(synced for _, _, synced in results[1:])
    assert os.fstat(good).st_size == FRAME.size + len(b"\x04before")
    os.close(good)
    os.close(read_only)


@pytest.mark.parametrize("make", WRITERS)
def test_an_abandoning_stop_drops_the_queued_jobs(make: MakeWriter, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "journal", os.O_WRONLY | os.O_CREAT, 0o644)
    writer = make(1 << 20, 0.0)
    for n in range(3):
        writer.submit(fd, 0, (b"\x04%d" % n,), True)
    assert [error for _, error, _ in _drain(writer, abandon=True)] == [errno.ECANCELED] * 3
    assert os.fstat(fd).st_size == 0
    os.close(fd)


@pytest.mark.parametrize("make", WRITERS)
def test_a_woken_writer_makes_its_eventfd_readable_once_a_group_completed(
    make: MakeWriter, tmp_path: Path
) -> None:
    fd = os.open(tmp_path / "journal", os.O_WRONLY | os.O_CREAT, 0o644)
    writer = make(1 << 20, 0.0)
    thread = threading.Thread(target=writer.run)
    thread.start()
    try:
        writer.submit(fd, 0, (b"\x04x",), True)
        writer.wake()
        deadline = time.monotonic() + 10
        while not select.select([writer.fileno()], [], [], 0.01)[0]:
            assert time.monotonic() < deadline, "the eventfd never turned readable"
        collected = writer.collect()
        assert [(group, error, synced) for group, error, synced, *_ in collected] == [(1, 0, True)]
        assert not select.select([writer.fileno()], [], [], 0)[0]  # collect() read it
    finally:
        writer.stop(False)
        thread.join(10)
    os.close(fd)


def test_journals_use_the_compiled_writer_unless_pure_python_is_asked_for() -> None:
    compiled_journal_module()
    probe = (
        "import bookie.storage.fastpath as f, bookie.storage.journal_writer as w; "
        "print(f.JOURNAL_COMPILED, type(w.new_writer(1, 0.0)).__module__)"
    )
    seen = probe_pure_python(probe, (None, "0", "1"))
    compiled, pure = "True bookie.storage._fastjournal", "False bookie.storage.journal_writer"
    assert seen == {None: compiled, "0": compiled, "1": pure}
    if not fastpath.pure_python_asked():
        assert fastpath.unbuilt() == []  # the bookie's start-up warning names none
