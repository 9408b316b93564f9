"""Full and failing disks never lose an acknowledged entry (real bookie processes).

ENOSPC comes from a small real tmpfs, EIO from an LD_PRELOAD shim (tests/integration/
shims/eio.c; this kernel has no device-mapper). The rules: no add is acknowledged after a
failed journal write or sync; the bookie turns read-only (announced so) and keeps serving
reads; a restart replays what is durable; writers move on without an error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import walog
from tests.integration.bookies import make_add, running_bookie
from tests.integration.disks import (
    add_status,
    eio_switch,
    fill_to,
    info,
    read_entries,
    small_tmpfs,
    wait_until,
)
from walog.testing import BookieProcess, LocalCluster
from walog.wire.proto import bookie_pb2 as pb

LEDGER = 4242
NO_USAGE_LIMIT = [
    "--disk-usage-threshold", "1",
    "--disk-usage-warn-threshold", "1",
    "--disk-usage-lwm-threshold", "1",
]  # fmt: skip


def _payload(entry_id: int, size: int = 1000) -> bytes:
    unit = b"%d;" % entry_id
    return (unit * (size // len(unit) + 1))[:size]


def _restart_and_check(bookie: BookieProcess, metadata: str, acked: list[int], size: int) -> None:
    """Crash the bookie, restart it and check it serves every acknowledged entry, writable."""
    bookie.kill()
    bookie.start().wait_ready()
    got = [data for first in range(0, len(acked), 50) for data in
           read_entries(bookie, LEDGER, first, min(first + 49, len(acked) - 1))]  # fmt: skip
    assert got == [_payload(i, size) for i in acked]
    assert not info(bookie).read_only
    with walog.connect(metadata) as client:
        wait_until(lambda: bookie.bookie_id in client.bookies(), "the bookie is available")
        assert client.read_only_bookies() == []
    assert add_status(bookie, make_add(LEDGER + 1, 0, b"after")) == pb.OK


def _assert_read_only(bookie: BookieProcess, metadata: str) -> None:
    assert info(bookie).read_only
    with walog.connect(metadata) as client:
        # The switch makes the new record before it removes the old one: wait for both.
        wait_until(
            lambda: (
                client.read_only_bookies() == [bookie.bookie_id]
                and bookie.bookie_id not in client.bookies()
            ),
            "read-only registration",
        )


def test_eio_on_journal_sync_acks_nothing_after_it_and_restart_keeps_every_acked_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal"
    switch = eio_switch(tmp_path, journal, calls="fsync,fdatasync")
    for name, value in switch.env.items():
        monkeypatch.setenv(name, value)
    metadata = f"sqlite:///{tmp_path}/meta.db"
    with running_bookie(
        tmp_path / "bookie",
        metadata,
        extra_args=["--journal-dir", str(journal), "--disk-check-interval-s", "0.1"],
    ) as bookie:
        monkeypatch.delenv("LD_PRELOAD")  # only the bookie runs with the shim
        acked = [
            i for i in range(50) if add_status(bookie, make_add(LEDGER, i, _payload(i))) == pb.OK
        ]
        assert acked == list(range(50))

        switch.on()
        statuses = [add_status(bookie, make_add(LEDGER, i, _payload(i))) for i in range(50, 60)]
        assert statuses == [pb.IO_ERROR] * 10, "an add was answered after a failed sync"
        _assert_read_only(bookie, metadata)
        assert read_entries(bookie, LEDGER, 0, 49) == [_payload(i) for i in range(50)]
        log = bookie.log()
        assert log.count('"journal failed"') == 1 and "Input/output error" in log
        assert '"bookie turned read-only"' in log

        switch.off()
        _restart_and_check(bookie, metadata, acked, 1000)


def test_enospc_on_the_journal_acks_nothing_after_it_and_restart_keeps_every_acked_entry(
    tmp_path: Path,
) -> None:
    metadata = f"sqlite:///{tmp_path}/meta.db"
    size = 64 * 1024
    with small_tmpfs(16) as disk:
        ballast = disk / "ballast"
        with running_bookie(
            tmp_path / "bookie",
            metadata,
            extra_args=[
                "--journal-dir",
                str(disk / "journal"),
                "--journal-file-bytes",
                "8MiB",
                *NO_USAGE_LIMIT,
            ],
        ) as bookie:
            fill_to(ballast, 0.8)
            statuses = [
                add_status(bookie, make_add(LEDGER, i, _payload(i, size))) for i in range(100)
            ]
            acked = [i for i, status in enumerate(statuses) if status == pb.OK]
            assert acked == list(range(len(acked))) and 0 < len(acked) < 100
            assert set(statuses[len(acked) :]) == {pb.IO_ERROR}
            _assert_read_only(bookie, metadata)
            assert "No space left on device" in bookie.log()

            ballast.unlink()
            _restart_and_check(bookie, metadata, acked, size)


def test_eio_on_a_journal_during_a_pipelined_write_loses_nothing_and_the_writer_moves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal"
    switch = eio_switch(tmp_path, journal)
    with LocalCluster(bookies=3, data_dir=tmp_path / "cluster") as cluster:
        for name, value in switch.env.items():
            monkeypatch.setenv(name, value)
        with running_bookie(
            tmp_path / "bookie", cluster.metadata_uri, extra_args=["--journal-dir", str(journal)]
        ) as failing:
            monkeypatch.delenv("LD_PRELOAD")
            with walog.connect(cluster.metadata_uri) as client:
                wait_until(lambda: failing.bookie_id in client.bookies(), "registration")
                writer = client.create_ledger(3, 3, 2)
                while failing.bookie_id not in writer.metadata.ensembles[0][1]:
                    writer.close()
                    writer = client.create_ledger(3, 3, 2)
                with writer:
                    futures = [writer.append_async(_payload(i)) for i in range(1000)]
                    futures[-1].result(timeout=60)
                    switch.on()  # the next 4000, pipelined, meet a failing journal
                    futures += [writer.append_async(_payload(i)) for i in range(1000, 5000)]
                    assert [f.result(timeout=60) for f in futures] == list(range(5000))
                    assert failing.bookie_id not in writer.metadata.ensembles[-1][1]
                _assert_read_only(failing, cluster.metadata_uri)
                with client.open_ledger(writer.ledger_id) as reader:
                    assert reader.last_add_confirmed == 4999
                    for first in range(0, 5000, 500):
                        got = [e.data for e in reader.read(first, first + 499)]
                        assert got == [_payload(i) for i in range(first, first + 500)]


def test_eio_on_the_entry_logs_turns_read_only_until_a_checkpoint_succeeds_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "bookie"
    switch = eio_switch(tmp_path, data_dir / "entrylogs")
    for name, value in switch.env.items():
        monkeypatch.setenv(name, value)
    metadata = f"sqlite:///{tmp_path}/meta.db"
    with running_bookie(
        data_dir,
        metadata,
        extra_args=["--checkpoint-interval-s", "0.2", "--disk-check-interval-s", "0.1"],
    ) as bookie:
        monkeypatch.delenv("LD_PRELOAD")
        statuses = [add_status(bookie, make_add(LEDGER, i, _payload(i))) for i in range(50)]
        assert statuses == [pb.OK] * 50
        switch.on()
        wait_until(lambda: info(bookie).read_only, "read-only after a failed checkpoint")
        _assert_read_only(bookie, metadata)
        assert add_status(bookie, make_add(LEDGER, 50, _payload(50))) == pb.READ_ONLY
        assert read_entries(bookie, LEDGER, 0, 49) == [_payload(i) for i in range(50)]

        switch.off()
        wait_until(lambda: not info(bookie).read_only, "writable after a checkpoint succeeded")
        with walog.connect(metadata) as client:
            wait_until(lambda: bookie.bookie_id in client.bookies(), "available again")
        log = bookie.log()
        assert log.count('"checkpoint failed"') == 1, "one line per outage"
        assert '"checkpoint succeeded again"' in log
        assert add_status(bookie, make_add(LEDGER, 50, _payload(50))) == pb.OK
        _restart_and_check(bookie, metadata, list(range(51)), 1000)
