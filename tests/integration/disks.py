"""Disk trouble for tests: a size-limited tmpfs mounted by the test, injected EIO, and a
page cache that dies with the process.

Mount points are named ``walog-disk-<pid>-*`` after the pytest process that made them. A
run killed before its clean-up leaves them mounted; the next run unmounts every such mount
whose process is gone (never one of a run still going, in another worktree for example).
Mounting needs root: a test that cannot mount fails with one line saying so.

EIO comes from an LD_PRELOAD library (shims/eio.c, built with the C compiler): this kernel
has no device-mapper, so no dm ``error`` or ``flakey`` target. For the same reason the loss
of unsynced writes in a machine crash comes from one too (shims/pagecache.c): it holds a
process's writes to chosen files in the process's memory until they are synced, so a
SIGKILL loses what a power cut would.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.bookies import answers
from walog.testing import BookieProcess
from walog.testing.tempdirs import owner_alive, owner_of
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

PREFIX = "walog-disk-"


def _mount_points() -> list[str]:
    with open("/proc/mounts", encoding="utf-8") as mounts:
        return [line.split()[1] for line in mounts]


def sweep_stale_mounts() -> None:
    """Unmount (lazily) and remove the mounts left by killed test runs."""
    for point in _mount_points():
        pid = owner_of(Path(point).name, PREFIX)
        if pid is not None and not owner_alive(pid):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
            with contextlib.suppress(OSError):
                os.rmdir(point)


@contextlib.contextmanager
def small_tmpfs(size_mib: int) -> Iterator[Path]:
    """A fresh tmpfs of ``size_mib`` MiB, unmounted at the end."""
    sweep_stale_mounts()
    point = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        os.rmdir(point)
        pytest.fail(f"cannot mount a {size_mib} MiB tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(point)


def fill(directory: Path) -> int:
    """Write a file in ``directory`` until its file system is full; the bytes written."""
    written = 0
    chunk = b"\0" * (64 * 1024)
    with open(directory / "filler", "wb", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return written


SHIM_SOURCE = Path(__file__).with_name("shims") / "eio.c"
PAGECACHE_SOURCE = Path(__file__).with_name("shims") / "pagecache.c"


def _build_shim(source: Path, library: Path, name: str) -> Path:
    """Compile the LD_PRELOAD library ``source`` into ``library``; fail the test with one
    line when that cannot be done."""
    try:
        done = subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"],
            capture_output=True,
            text=True,
            check=False,
        )
        error = done.stderr.strip() if done.returncode else ""
    except FileNotFoundError as exc:
        error = str(exc)
    if error:
        pytest.fail(f"cannot build the {name} shim (needs a C compiler, cc): {error}")
    return library


class EioSwitch:
    """Environment for a bookie process whose files under ``directory`` fail with EIO
    while :meth:`on` is in effect (for the calls in ``calls``).

    Args:
        library: the built shim.
        directory: files whose path starts with it fail (a directory, or one file).
        trigger: the file whose existence turns the failures on.
        calls: which of ``fsync``, ``fdatasync``, ``write``, ``pread`` fail.
    """

    def __init__(self, library: Path, directory: Path, trigger: Path, calls: str) -> None:
        self.env = {
            "LD_PRELOAD": str(library),
            "WALOG_EIO_DIR": str(directory),
            "WALOG_EIO_TRIGGER": str(trigger),
            "WALOG_EIO_CALLS": calls,
        }
        self._trigger = trigger

    def on(self) -> None:
        """From now on the calls fail."""
        self._trigger.touch()

    def off(self) -> None:
        """From now on the calls reach the disk again."""
        self._trigger.unlink(missing_ok=True)


def eio_switch(work_dir: Path, directory: Path, calls: str = "fsync,fdatasync,write") -> EioSwitch:
    """Build the EIO shim into ``work_dir`` and return its switch for ``directory``."""
    library = _build_shim(SHIM_SOURCE, work_dir / "walog-eio.so", "EIO")
    return EioSwitch(library, directory, work_dir / "walog-eio-on", calls)


def page_cache_lost_on_kill(work_dir: Path, files: str) -> dict[str, str]:
    """Build the page cache shim into ``work_dir``; the environment for processes whose
    writes to files matching the glob ``files`` stay in their memory until synced (a kill
    then loses them, as a crash of the machine loses the kernel's unsynced pages)."""
    library = _build_shim(PAGECACHE_SOURCE, work_dir / "walog-pagecache.so", "page cache")
    return {"LD_PRELOAD": str(library), "WALOG_PAGECACHE_FILES": files}


def used_share(path: Path) -> float:
    """Used share of the file system holding ``path`` (as the bookie measures it)."""
    st = os.statvfs(path)
    return 1 - st.f_bavail / st.f_blocks


def fill_to(ballast_path: Path, share: float) -> None:
    """Grow the file ``ballast_path`` until its file system is ``share`` used."""
    st = os.statvfs(ballast_path.parent)
    missing = int((share - used_share(ballast_path.parent)) * st.f_blocks * st.f_frsize)
    if missing <= 0:
        return
    with open(ballast_path, "ab") as ballast:
        ballast.write(b"\0" * missing)
        ballast.flush()
        os.fsync(ballast.fileno())


def info(bookie: BookieProcess) -> pb.InfoResponse:
    """The bookie's ``Info``."""
    with bookie.channel() as channel:
        return pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)


def add_status(bookie: BookieProcess, batch: pb.AddBatch) -> int:
    """Send one batch on an add stream of its own; the one status all its entries got."""
    with bookie.channel() as channel:
        frames = pb_grpc.BookieStub(channel).Add(iter([pb.AddFrame(batches=[batch])]), timeout=30)
        (status,) = {a.status for a in answers(r for frame in frames for r in frame.results)}
    return status


def read_entries(bookie: BookieProcess, ledger_id: int, first: int, last: int) -> list[bytes]:
    """The payloads of entries ``first..last`` the bookie serves (fewer if it lacks some)."""
    with bookie.channel() as channel:
        reply = pb_grpc.BookieStub(channel).Read(
            pb.ReadRequest(ledger_id=ledger_id, first_entry_id=first, last_entry_id=last),
            timeout=30,
        )
    if reply.status == pb.NO_SUCH_ENTRY:
        return []
    assert reply.status == pb.OK, reply
    return [e.data for e in reply.entries]


def wait_until(check: Callable[[], bool], what: str, within: float = 30.0) -> None:
    """Poll ``check`` (a state that has no event to wait on) until it holds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within:g}s: {what}")
        time.sleep(0.05)


def bookie_metric(port: int, name: str) -> float:
    """A bookie's metric ``name`` (its first sample) from its metrics port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


__all__ = [
    "EioSwitch",
    "add_status",
    "bookie_metric",
    "eio_switch",
    "fill",
    "fill_to",
    "info",
    "page_cache_lost_on_kill",
    "read_entries",
    "small_tmpfs",
    "sweep_stale_mounts",
    "used_share",
    "wait_until",
]
