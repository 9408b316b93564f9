"""The read-only-by-disk-usage rule (bookie/disks.py): marks, hysteresis, journal failure."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bookie.config import BookieConfig
from bookie.disks import (
    MIN_BYTES_BETWEEN_CHECKS,
    DiskMonitor,
    DiskThresholds,
    DiskUsage,
    bytes_before_check,
    entry_log_bytes_for,
    full_disks,
    measure,
    under_pressure,
)
from bookie.main import parse_config
from bookie.space import Reclaimer

A, B = Path("/a"), Path("/b")


def _marks(high: float, warn: float, low: float) -> DiskThresholds:
    return DiskThresholds(
        disk_usage_threshold=high, disk_usage_warn_threshold=warn, disk_usage_lwm_threshold=low
    )


MARKS = _marks(0.95, 0.9, 0.8)


def _usage(directory: Path, share: float) -> DiskUsage:
    return DiskUsage(directory, int(share * 1000), 1000)


def test_a_disk_turns_full_above_the_high_water_mark_only() -> None:
    assert full_disks([_usage(A, 0.95), _usage(B, 0.5)], MARKS, set()) == set()
    assert full_disks([_usage(A, 0.951), _usage(B, 0.5)], MARKS, set()) == {A}


def test_a_full_disk_stays_full_until_below_the_low_water_mark() -> None:
    assert full_disks([_usage(A, 0.85)], MARKS, {A}) == {A}
    assert full_disks([_usage(A, 0.8)], MARKS, {A}) == {A}
    assert full_disks([_usage(A, 0.799)], MARKS, {A}) == set()


def test_any_full_disk_counts_data_or_journal() -> None:
    assert full_disks([_usage(A, 0.5), _usage(B, 0.99)], MARKS, set()) == {B}


@pytest.mark.parametrize(
    ("high", "warn", "low", "name"),
    [
        (0.0, 0.5, 0.5, "disk_usage_threshold"),
        (1.5, 0.5, 0.5, "disk_usage_threshold"),
        (0.9, 0.5, 0.95, "disk_usage_lwm_threshold"),
        (0.9, 0.5, 0.0, "disk_usage_lwm_threshold"),
        (0.9, 0.99, 0.5, "disk_usage_warn_threshold"),
    ],
)
def test_bad_marks_are_refused_naming_the_setting(
    high: float, warn: float, low: float, name: str
) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be"):
        _marks(high, warn, low)


def test_flags_map_onto_the_thresholds_with_bookkeeper_defaults() -> None:
    config, _ = parse_config(["--data-dir", "d", "--listen", "h:1", "--metadata", "sqlite:///x"])
    assert config.disk_thresholds() == _marks(0.95, 0.90, 0.90)
    assert config.disk_check_interval_s == 10.0
    with pytest.raises(ValueError, match="--disk-usage-lwm-threshold"):
        BookieConfig(
            data_dir=Path("d"),
            listen="h:1",
            metadata="sqlite:///x",
            disk_usage_threshold=0.5,
            disk_usage_lwm_threshold=0.6,
        )


def test_monitor_switches_mode_once_per_change_and_a_storage_failure_turns_read_only(
    tmp_path: Path,
) -> None:
    share = measure(tmp_path).share
    assert share > 0
    changes: list[str | None] = []
    failure: list[str] = []

    async def record(reason: str | None) -> None:
        changes.append(reason)

    async def scenario() -> None:
        full = DiskMonitor(
            [tmp_path, tmp_path],  # one file system: measured once
            _marks(share / 2, share / 2, share / 4),
            1.0,
            lambda: None,
            record,
        )
        assert len(full.directories) == 1
        assert (await full.check() or "").startswith("disk full: ")
        await full.check()
        assert len(changes) == 1 and full.read_only_entered == 1

        changes.clear()
        roomy = DiskMonitor(
            [tmp_path], DiskThresholds(), 1.0, lambda: failure[0] if failure else None, record
        )
        assert await roomy.check() is None
        assert changes == []  # writable from the start: nothing to apply
        failure.append("journal failed: [Errno 28] No space left on device")
        assert (await roomy.check() or "").startswith("journal failed: ")
        assert changes and changes[-1] is not None

    asyncio.run(scenario())


def test_a_mode_change_the_metadata_store_refused_is_applied_at_the_next_check(
    tmp_path: Path,
) -> None:
    share = measure(tmp_path).share
    calls: list[str | None] = []

    async def flaky(reason: str | None) -> None:
        calls.append(reason)
        if len(calls) == 1:
            raise OSError("metadata store unreachable")

    async def scenario() -> None:
        monitor = DiskMonitor(
            [tmp_path],
            _marks(share / 2, share / 2, share / 4),
            1.0,
            lambda: None,
            flaky,
        )
        await monitor.check()
        await monitor.check()
        await monitor.check()

    asyncio.run(scenario())
    assert len(calls) == 2 and all(c is not None for c in calls)


def test_a_disk_is_under_pressure_beyond_the_warning_mark_only() -> None:
    assert not under_pressure([_usage(A, 0.9), _usage(B, 0.5)], MARKS)
    assert under_pressure([_usage(A, 0.5), _usage(B, 0.901)], MARKS)


def test_a_disk_under_pressure_wakes_the_reclaimer_at_every_measurement(tmp_path: Path) -> None:
    share = measure(tmp_path).share
    woken: list[bool] = []

    async def record(reason: str | None) -> None:
        del reason

    async def scenario() -> None:
        calm = DiskMonitor(
            [tmp_path], DiskThresholds(), 10.0, lambda: None, record, lambda: woken.append(False)
        )
        await calm.check()
        assert woken == [] and not calm.under_pressure
        pressed = DiskMonitor(
            [tmp_path],
            _marks(min(1.0, share * 2), share / 2, share / 4),
            10.0,
            lambda: None,
            record,
            lambda: woken.append(True),
        )
        await pressed.check()
        await pressed.check()
        assert woken == [True, True] and pressed.under_pressure

    asyncio.run(scenario())


def test_a_reclaimer_pass_collects_then_compacts_and_passes_keep_their_gap() -> None:
    steps: list[tuple[str, float]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def collect() -> None:
            steps.append(("collect", loop.time()))

        async def compact() -> None:
            steps.append(("compact", loop.time()))

        reclaimer = Reclaimer(collect, compact, gap_s=0.2)
        task = asyncio.create_task(reclaimer.run())
        reclaimer.wake()
        await asyncio.sleep(0.05)
        reclaimer.wake()  # within the gap: the next pass waits for it
        reclaimer.wake()
        await asyncio.sleep(0.4)
        task.cancel()
        assert reclaimer.passes == 2

    asyncio.run(scenario())
    assert [name for name, _ in steps] == ["collect", "compact", "collect", "compact"]
    assert steps[2][1] - steps[0][1] >= 0.2 * 0.9


def test_entry_logs_are_at_most_half_the_data_disks_reserve() -> None:
    """So that compacting any log, which needs its live bytes free, fits in the reserve."""
    mib = 1024 * 1024
    assert entry_log_bytes_for(512 * mib, reserve=int(12.8 * mib)) == int(6.4 * mib)
    assert entry_log_bytes_for(512 * mib, reserve=50 * 1024 * mib) == 512 * mib
    assert entry_log_bytes_for(512 * mib, reserve=mib) == mib  # never below 1 MiB
    assert entry_log_bytes_for(512 * mib, reserve=0) == 512 * mib  # no reserve: as given


def test_entries_not_yet_checkpointed_count_as_used_on_the_data_disk(tmp_path: Path) -> None:
    usage = measure(tmp_path)
    free = usage.total_bytes - usage.used_bytes
    changes: list[str | None] = []

    async def record(reason: str | None) -> None:
        changes.append(reason)

    async def scenario() -> None:
        monitor = DiskMonitor(
            [tmp_path], DiskThresholds(), 10.0, lambda: None, record, unwritten_bytes=lambda: free
        )
        assert (await monitor.check() or "").startswith("disk full: ")
        assert monitor.usages[0].share == 1.0

    asyncio.run(scenario())
    assert len(changes) == 1


def test_a_bookie_measures_again_once_it_journaled_a_quarter_of_the_room_below_the_mark() -> None:
    mib = 1024 * 1024
    marks = DiskThresholds()  # read-only above 95 %
    data, journal = DiskUsage(A, 50 * mib, 100 * mib), DiskUsage(B, 87 * mib, 100 * mib)
    assert bytes_before_check([data], marks) == 45 * mib // 4
    assert bytes_before_check([data, journal], marks) == 8 * mib // 4  # the fuller disk's room
    # Near or past the mark: every MIN_BYTES_BETWEEN_CHECKS, not after every group commit.
    assert bytes_before_check([DiskUsage(A, 95 * mib - 1, 100 * mib)], marks) == (
        MIN_BYTES_BETWEEN_CHECKS
    )
    assert bytes_before_check([DiskUsage(A, 99 * mib, 100 * mib)], marks) == (
        MIN_BYTES_BETWEEN_CHECKS
    )


def test_the_monitor_measures_as_soon_as_the_journal_wrote_enough_not_at_its_interval(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        measured = asyncio.Queue[None]()

        def unwritten() -> int:  # asked once per measurement
            measured.put_nowait(None)
            return 0

        async def record(reason: str | None) -> None:
            pass

        monitor = DiskMonitor(
            [tmp_path], DiskThresholds(), 3600.0, lambda: None, record, unwritten_bytes=unwritten
        )
        stop = asyncio.Event()
        task = asyncio.create_task(monitor.run(stop))
        await asyncio.wait_for(measured.get(), 10)  # the first measurement, at once
        step = bytes_before_check(monitor.usages, monitor.thresholds)
        monitor.journaled(step - 1)
        for _ in range(20):
            await asyncio.sleep(0)
        assert measured.empty()  # not enough yet; the next timed one is an hour away
        monitor.journaled(1)
        await asyncio.wait_for(measured.get(), 10)
        stop.set()
        await task

    asyncio.run(scenario())
