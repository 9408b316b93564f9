"""Read-only mode by disk usage, with a real bookie on a small real file system (tmpfs).

The rule (bookie/disks.py): above the high-water mark of its data or journal disk a bookie
refuses plain adds, is announced read-only, and keeps serving reads and fences; writers
change ensembles away from it without an error reaching them; once its disks are below the
low-water mark it takes adds again by itself.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import walog
from tests.integration.bookies import make_add, running_bookie
from tests.integration.disks import (
    add_status,
    bookie_metric,
    fill_to,
    info,
    read_entries,
    small_tmpfs,
    used_share,
    wait_until,
)
from walog import main as cli
from walog.testing import LocalCluster, ZooKeeperServer, free_port
from walog.wire.digest import master_key
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
ENTRY = 4096
ROUNDS = 128  # 9 ledgers x 128 entries x 64 KiB: 72 MiB against a 128 MiB disk
ROUNDS_PER_CHECKPOINT = 8  # 4.5 MiB between checkpoints, against 8 MiB entry logs
THRESHOLDS = [
    "--disk-usage-threshold", "0.5",
    "--disk-usage-warn-threshold", "0.45",
    "--disk-usage-lwm-threshold", "0.4",
    "--disk-check-interval-s", "0.1",
]  # fmt: skip


def _payload(i: int) -> bytes:
    return (b"%08d" % i) * (ENTRY // 8)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(128) as mount:
        yield mount


def _walog_bookies(metadata: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    assert cli.main(["bookies", "--metadata", metadata]) == 0
    # Rows are "ID STATE RACK".
    return dict(line.split()[:2] for line in capsys.readouterr().out.splitlines())


def test_full_disk_turns_bookie_read_only_writers_move_on_and_it_recovers_below_lwm(
    disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics_port = free_port()
    with (
        LocalCluster(bookies=3, data_dir=tmp_path / "cluster") as cluster,
        running_bookie(
            disk / "bookie",
            cluster.metadata_uri,
            extra_args=[*THRESHOLDS, "--metrics-port", str(metrics_port)],
        ) as small,
        walog.connect(cluster.metadata_uri) as client,
    ):
        wait_until(lambda: small.bookie_id in client.bookies(), "the small bookie registers")
        # Ballast up to 0.4 of the disk: the bookie itself then holds little when it turns
        # read-only, and even with the adds it takes before its next disk check (many on a
        # busy machine, in the journal and after a checkpoint in the entry logs too) it is
        # below the low-water mark once the ballast goes.
        ballast = disk / "ballast"
        fill_to(ballast, 0.4)
        # Placement spreads ledgers over the four bookies: take one that uses the small one.
        # Qa=3: every entry waits for the small bookie too, so the writer cannot finish
        # before the bookie turns read-only (with Qa=2 the two others could acknowledge
        # everything while the small one still works through its share).
        writer = client.create_ledger(3, 3, 3)
        while small.bookie_id not in writer.metadata.ensembles[0][1]:
            writer.close()
            writer = client.create_ledger(3, 3, 3)
        total = 20_000
        with writer:
            # Pipelined: 80 MiB in flight against 64 MiB below the high-water mark.
            futures = [writer.append_async(_payload(i)) for i in range(total)]
            assert [f.result(timeout=120) for f in futures] == list(range(total))
            ensembles = writer.metadata.ensembles
        # The writer moved off the full bookie. (Where to is no measure of what the bookie
        # took: on a busy machine it can hold thousands of entries while the others have not
        # acknowledged entry 0 yet, and the change then replaces the ensemble at 0. That it
        # took entries before it filled up, its own reads of them show below.)
        assert small.bookie_id not in ensembles[-1][1], "the writer never changed its ensemble"
        # Above the low-water mark: the bookie counted the entries it had not checkpointed
        # yet, so it turned read-only before the disk itself passed the high-water mark.
        assert used_share(disk) > 0.4

        # Read-only: announced so, shown by Info and the metrics, no longer offered. (The
        # switch makes the new record before it removes the old one: wait for both.)
        wait_until(
            lambda: (
                client.read_only_bookies() == [small.bookie_id]
                and small.bookie_id not in client.bookies()
            ),
            "announced read-only",
        )
        modes = _walog_bookies(cluster.metadata_uri, capsys)
        assert modes.pop(small.bookie_id) == "read-only"
        assert sorted(modes.items()) == [(b, "writable") for b in sorted(cluster.bookie_ids)]
        assert info(small).read_only
        assert bookie_metric(metrics_port, "walog_bookie_read_only") == 1
        assert bookie_metric(metrics_port, "walog_bookie_disk_usage_ratio") > 0.5

        # Nothing acknowledged is lost; the full bookie still serves reads and fences.
        with client.open_ledger(writer.ledger_id) as reader:
            assert reader.last_add_confirmed == total - 1
            for first in range(0, total, 1000):
                got = reader.read(first, first + 999)
                assert [e.data for e in got] == [_payload(i) for i in range(first, first + 1000)]
        key = master_key(b"")
        with small.channel() as channel:
            stub = pb_grpc.BookieStub(channel)
            read = stub.Read(
                pb.ReadRequest(ledger_id=writer.ledger_id, first_entry_id=0, last_entry_id=9),
                timeout=10,
            )
            assert read.status == pb.OK, "the small bookie took no entry before it filled up"
            assert [e.data for e in read.entries] == [_payload(i) for i in range(10)]
            fence = stub.Fence(pb.FenceRequest(ledger_id=999_999, master_key=key), timeout=10)
            assert fence.status == pb.OK
        # A plain add is refused READ_ONLY; a recovery write still lands.
        assert add_status(small, make_add(888_888, 0, b"x")) == pb.READ_ONLY
        assert add_status(small, make_add(888_888, 0, b"x", recovery=True)) == pb.OK

        # Below the low-water mark again: writable by itself, announced as available.
        ballast.unlink()
        assert used_share(disk) < 0.4
        wait_until(
            lambda: small.bookie_id in client.bookies() and client.read_only_bookies() == [],
            "the bookie is available again",
        )
        assert _walog_bookies(cluster.metadata_uri, capsys)[small.bookie_id] == "writable"
        assert not info(small).read_only
        assert bookie_metric(metrics_port, "walog_bookie_read_only") == 0
        assert bookie_metric(metrics_port, "walog_bookie_read_only_entered_total") == 1
        assert add_status(small, make_add(777_777, 0, b"y")) == pb.OK


def test_full_bookie_is_writable_again_once_deletion_and_compaction_free_its_disk(
    disk: Path, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        _fill_delete_and_compact(stack, disk, tmp_path)


def _fill_delete_and_compact(stack: contextlib.ExitStack, disk: Path, tmp_path: Path) -> None:
    metrics_port = free_port()
    journal_disk = stack.enter_context(small_tmpfs(256))  # the journal on its own disk
    small_args = [
        *THRESHOLDS,
        "--journal-dir", str(journal_disk / "journal"),
        "--metrics-port", str(metrics_port),
        "--checkpoint-interval-s", "0.2",
        "--entry-log-file-bytes", str(8 * 1024 * 1024),
        "--gc-interval-s", "0.5", "--gc-grace-s", "0",
        "--minor-compaction-interval-s", "0.5", "--minor-compaction-threshold", "0.8",
    ]  # fmt: skip
    entry = 64 * 1024
    with (
        LocalCluster(bookies=3, data_dir=tmp_path / "cluster") as cluster,
        running_bookie(disk / "bookie", cluster.metadata_uri, extra_args=small_args) as small,
        walog.connect(cluster.metadata_uri) as client,
    ):
        wait_until(lambda: small.bookie_id in client.bookies(), "the small bookie registers")
        writers = []
        while len(writers) < 9:  # eight to delete, one to keep: all on the small bookie
            writer = client.create_ledger(3, 3, 2)
            if small.bookie_id in writer.metadata.ensembles[0][1]:
                writers.append(writer)
            else:
                writer.close()
        # A checkpoint writes its entries sorted by ledger: filled all at once, each ledger
        # would get entry logs of its own and the deletion alone would free them. Paced, each
        # checkpoint (every 0.2 s) holds a few rounds of every ledger, so every entry log
        # holds some of the kept ledger and must be compacted.
        for first in range(0, ROUNDS, ROUNDS_PER_CHECKPOINT):
            futures = [
                writer.append_async(bytes([n]) * entry)
                for _ in range(first, min(first + ROUNDS_PER_CHECKPOINT, ROUNDS))
                for n, writer in enumerate(writers)
            ]
            for future in futures:
                future.result(timeout=120)
            time.sleep(0.3)  # a checkpoint starts meanwhile
        for writer in writers:
            writer.close()
        wait_until(lambda: client.read_only_bookies() == [small.bookie_id], "read-only")
        full = used_share(disk)
        assert full > 0.4  # read-only a little below the mark: unwritten entries count

        keeper, doomed = writers[0], writers[1:]
        for writer in doomed:
            client.delete_ledger(writer.ledger_id)
        wait_until(
            lambda: small.bookie_id in client.bookies(),
            "writable again after deletion and compaction",
            within=60,
        )
        # Writable again under the low-water mark, as the bookie measured it (a compaction
        # may be copying meanwhile, so the disk's use now can be a little higher).
        [line] = [x for x in small.log().splitlines() if "bookie writable again" in x]
        usage = [float(share) / 100 for share in re.findall(r"(\d+(?:\.\d+)?)%", line)]
        assert usage and max(usage) < 0.4 < full, line
        # Logs left without live data went with the deletion; the ones shared with the kept
        # ledger are compacted by the minor passes, which may still be at it now. What
        # stays is the kept ledger's share: at most one ninth, plus the entry log being
        # filled and the index.
        wait_until(
            lambda: bookie_metric(metrics_port, "walog_bookie_entry_logs_compacted_total") > 0,
            "a minor compaction",
            within=60,
        )
        wait_until(
            lambda: used_share(disk) < 0.3, "compaction frees all but the kept share", within=60
        )
        with client.open_ledger(keeper.ledger_id) as reader:
            got = [e.data for first in range(0, ROUNDS, 32) for e in reader.read(first, first + 31)]
            assert got == [bytes([0]) * entry] * ROUNDS


def test_a_journal_disk_too_small_for_two_journal_files_is_refused_at_start(
    tmp_path: Path,
) -> None:
    with small_tmpfs(64) as disk:
        journal = disk / "journal"
        started = subprocess.run(
            [
                sys.executable, "-m", "bookie",
                "--data-dir", str(tmp_path / "bookie"),
                "--journal-dir", str(journal),
                "--listen", f"127.0.0.1:{free_port()}",
                "--metadata", f"sqlite:///{tmp_path}/meta.db",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO_ROOT,
        )  # fmt: skip
        assert not journal.exists()  # refused before anything was written there
    assert started.returncode == 1, started.stderr
    line = started.stderr.strip().splitlines()[-1]
    assert line == (
        f"python -m bookie: error: journal directory {journal} is on a disk of 67108864 bytes "
        "(64.0 MiB), too small for the journal: it needs at least 134217728 bytes (128.0 MiB) "
        "(2 journal files of --journal-file-bytes 67108864 bytes (64.0 MiB): the one being "
        "filled and the one before it, kept until a checkpoint retires it); give the journal "
        "a larger disk (--journal-dir) or smaller files (--journal-file-bytes)"
    )


WRITABLE_WITHIN_S = 120.0
"""At default settings a full bookie whose ledgers were deleted takes adds again within
this long (docs/bookies.md, *Full disks and read-only mode*)."""


def _deletion_to_writable_s(
    tmp_path: Path, metadata: str, disk_mib: int, ballast: float, *, keep: bool
) -> float:
    """Fill a bookie whose data disk is ``disk_mib`` MiB (a ballast file takes ``ballast``
    of it first) with four ledgers, round robin, until it turns read-only; delete them all
    (``keep``: all but the first), and return the seconds from the last deletion until the
    bookie is announced writable again. Every setting of the bookie is its default but its
    directories: the journal has a disk of its own (the default puts it in the data
    directory, where its files would be counted too). With ``keep`` the kept ledger's
    entries share the one entry log (512 MiB, larger than the disk) with the deleted ones,
    so the space comes back only through compaction."""
    entry = 64 * 1024
    rate = 16  # entries a second: 1 MiB/s, so a checkpoint (every 10 s) never jumps the reserve
    with contextlib.ExitStack() as stack:
        disk = stack.enter_context(small_tmpfs(disk_mib))
        journal_disk = stack.enter_context(small_tmpfs(256))
        fill_to(disk / "ballast", ballast)
        cluster = stack.enter_context(
            LocalCluster(bookies=3, data_dir=tmp_path / "cluster", metadata=metadata)
        )
        small = stack.enter_context(
            running_bookie(
                disk / "bookie",
                cluster.metadata_uri,
                extra_args=["--journal-dir", str(journal_disk / "journal")],
            )
        )
        client = stack.enter_context(walog.connect(cluster.metadata_uri))
        wait_until(lambda: small.bookie_id in client.bookies(), "the small bookie registers")
        ledger_ids: list[int] = []
        writers = []
        while len(writers) < 4:  # all four on the small bookie
            writer = client.create_ledger(3, 3, 2)
            ledger_ids.append(writer.ledger_id)
            if small.bookie_id in writer.metadata.ensembles[0][1]:
                writers.append(writer)
            else:
                writer.close()
        started = time.monotonic()
        second = 0
        while client.read_only_bookies() != [small.bookie_id]:
            assert time.monotonic() - started < 600, "the small bookie never turned read-only"
            futures = [
                writers[i % 4].append_async(bytes([second % 256]) * entry) for i in range(rate)
            ]
            for future in futures:
                future.result(timeout=60)
            second += 1
            time.sleep(max(0.0, started + second - time.monotonic()))  # pacing
        filled = time.monotonic() - started
        for writer in writers:
            writer.close()
        full = used_share(disk)
        # The bookie counts what it has not checkpointed yet: read-only a little below
        # the mark, always above the low-water mark.
        assert full > 0.9
        kept = writers[0]
        for ledger_id in ledger_ids:
            if not (keep and ledger_id == kept.ledger_id):
                client.delete_ledger(ledger_id)
        deleted = time.monotonic()
        wait_until(
            lambda: small.bookie_id in client.bookies() and client.read_only_bookies() == [],
            "writable again after its ledgers were deleted",
            within=WRITABLE_WITHIN_S + 60,
        )
        took = time.monotonic() - deleted
        print(
            f"\nfilled a {disk_mib} MiB disk from {ballast:.0%} to {full:.1%} in {filled:.0f} s; "
            f"{'one ledger of four kept; ' if keep else ''}writable again {took:.1f} s after "
            f"the deletion (disk {used_share(disk):.1%})"
        )
        assert used_share(disk) < 0.9
        assert add_status(small, make_add(777_777, 0, b"y")) == pb.OK
        if keep:  # the small bookie still serves the kept ledger's entries it took
            ensembles = kept.metadata.ensembles
            last = ensembles[1][0] - 1 if len(ensembles) > 1 else kept.last_add_confirmed
            assert last > 0
            got = [  # in reads of 32: an answer holds a few MiB at most
                data
                for first in range(0, last + 1, 32)
                for data in read_entries(small, kept.ledger_id, first, min(first + 31, last))
            ]
            assert got == [bytes([(i // 4) % 256]) * entry for i in range(last + 1)]  # 4 a second
        return took


@pytest.mark.slow  # ~50 s alone: the fill is paced; the disk rules' unit tests run always
@pytest.mark.zk
@pytest.mark.timeout(400)  # a loaded machine is slower
def test_a_full_bookie_at_default_settings_is_writable_soon_after_the_deletions(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    """The short form: the ballast takes most of the disk, the bookie fills the rest."""
    metadata = zookeeper.uri(f"/space-{uuid.uuid4().hex[:12]}")
    took = _deletion_to_writable_s(tmp_path, str(metadata), disk_mib=256, ballast=0.87, keep=False)
    assert took < WRITABLE_WITHIN_S, f"writable again only {took:.1f} s after the deletion"


@pytest.mark.slow
@pytest.mark.zk
@pytest.mark.timeout(400)  # ~70 s alone
def test_a_full_bookie_at_default_settings_is_writable_within_two_minutes_of_the_deletions(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    metadata = zookeeper.uri(f"/space-{uuid.uuid4().hex[:12]}")
    took = _deletion_to_writable_s(tmp_path, str(metadata), disk_mib=256, ballast=0.8, keep=True)
    assert took < WRITABLE_WITHIN_S, f"writable again only {took:.1f} s after the deletion"
