"""A damaged index is refused with a message naming the file, and ``python -m bookie
--rebuild-index`` rebuilds it from the entry logs: every stored entry is served again, a
plain add to a ledger of lost key is never acknowledged, fences and recovery writes work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bookie.storage.journal_files import journal_files
from tests.integration.bookies import REPO_ROOT, make_add
from tests.integration.disks import add_status, read_entries, wait_until
from walog.testing import BookieProcess
from walog.wire.digest import master_key
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

OLD, RECENT = 7, 8  # OLD: only in the entry logs after the rebuild; RECENT: in the journal too


def _payload(ledger_id: int, entry_id: int) -> bytes:
    return b"%d:%d;" % (ledger_id, entry_id) * 40


def _read_all(bookie: BookieProcess, ledger_id: int, count: int) -> list[bytes]:
    got: list[bytes] = []
    for first in range(0, count, 100):
        got += read_entries(bookie, ledger_id, first, min(first + 99, count - 1))
    return got


def test_a_damaged_index_is_refused_and_rebuilt_from_the_entry_logs(tmp_path: Path) -> None:
    data_dir = tmp_path / "bookie"
    bookie = BookieProcess(data_dir, f"sqlite:///{tmp_path}/meta.db")
    bookie.start().wait_ready()
    try:
        for entry_id in range(300):
            assert add_status(bookie, make_add(OLD, entry_id, _payload(OLD, entry_id))) == pb.OK
        bookie.terminate()  # the final checkpoint puts them in the entry logs
        # A checkpoint of the next run deletes the journal file that holds OLD's records.
        first_files = journal_files(data_dir / "journal")
        bookie.start(["--checkpoint-interval-s", "0.1"]).wait_ready()
        wait_until(
            lambda: journal_files(data_dir / "journal")[0][0] > first_files[-1][0],
            "the journal files of the first run are deleted",
        )
        bookie.terminate()
        bookie.start(["--checkpoint-interval-s", "3600"]).wait_ready()
        for entry_id in range(20):
            batch = make_add(RECENT, entry_id, _payload(RECENT, entry_id))
            assert add_status(bookie, batch) == pb.OK
        bookie.kill()  # RECENT stays in the journal only

        index = data_dir / "index" / "data.mdb"
        raw = bytearray(index.read_bytes())
        for offset in range(4096 * 2, len(raw), 4096):  # every page number but the metas'
            raw[offset + 3] ^= 0x40
        index.write_bytes(bytes(raw))
        bookie.start()
        assert bookie.wait(timeout=60) == 1
        log = bookie.log()
        assert f"index file {index} is damaged" in log and "--rebuild-index" in log

        rebuild = subprocess.run(
            [sys.executable, "-m", "bookie", "--rebuild-index", "--data-dir", str(data_dir)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert rebuild.returncode == 0, rebuild.stderr
        assert "300 entries of 1 ledgers" in rebuild.stdout
        assert len(list(data_dir.glob("index.damaged-*"))) == 1

        bookie.start().wait_ready()
        assert _read_all(bookie, OLD, 300) == [_payload(OLD, i) for i in range(300)]
        assert _read_all(bookie, RECENT, 20) == [_payload(RECENT, i) for i in range(20)]
        # OLD's key went with the old index: a plain add is not acknowledged (the ledger
        # may have been fenced), a recovery write or a fence gives it its key back.
        assert add_status(bookie, make_add(OLD, 300, _payload(OLD, 300))) == pb.IO_ERROR
        with bookie.channel() as channel:
            fence = pb_grpc.BookieStub(channel).Fence(
                pb.FenceRequest(ledger_id=OLD, master_key=master_key(b"")), timeout=10
            )
        assert (fence.status, fence.last_entry_id) == (pb.OK, 299)
        recovery = make_add(OLD, 300, _payload(OLD, 300), recovery=True)
        assert add_status(bookie, recovery) == pb.OK
        assert add_status(bookie, make_add(OLD, 301, b"x")) == pb.FENCED
        # RECENT's key and records came back from the journal: it takes adds again.
        assert add_status(bookie, make_add(RECENT, 20, _payload(RECENT, 20))) == pb.OK
    finally:
        bookie.stop_quietly()
