"""A warm standby for a plain log: leader election on both APIs, a reader that reports its
lag, and the standby example, which kills its leader with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

import walog
import walog.aio
from walog.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]


def test_a_readers_lag_counts_the_confirmed_entries_it_has_not_returned(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with log.open_writer() as writer:
            for data in (b"a", b"b", b"c"):
                writer.append(data)  # one entry each: nothing else is in flight
            writer.roll()
            writer.append(b"d")
            with log.open_reader("earliest") as reader:
                lag = reader.lag()
                assert (lag.entries_behind, lag.caught_up) == (4, False)
                assert reader.read_next(timeout=30) is not None
                # A record taken from the facade's buffer counts as read.
                assert reader.lag().entries_behind == 3
                for _ in range(3):
                    assert reader.read_next(timeout=30) is not None
                lag = reader.lag()
                assert lag.caught_up and lag.entries_behind == 0
                writer.append(b"e")
                assert reader.lag().entries_behind == 1
                assert reader.read_next(timeout=30) is not None
                assert reader.lag().caught_up


async def test_the_async_readers_lag_is_the_same(cluster: LocalCluster, log_name: str) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.open_log(log_name)
        writer = await log.open_writer()
        await writer.append(b"a")
        reader = await log.open_reader("earliest")
        try:
            assert (await reader.lag()).entries_behind == 1
            assert await reader.read_next(timeout=30) is not None
            assert (await reader.lag()).caught_up
        finally:
            await reader.close()
            await writer.close()


def test_leader_election_of_a_log_is_public_on_the_sync_api(
    cluster: LocalCluster, log_name: str
) -> None:
    with (
        walog.connect(cluster.metadata_uri) as one,
        walog.connect(cluster.metadata_uri) as two,
    ):
        log_a, log_b = one.open_log(log_name), two.open_log(log_name)
        assert log_a.current_leader() is None
        term = log_a.elect("a", timeout=30)
        assert term.is_leader and term.candidate_id == "a"
        assert log_b.current_leader() == ("a", term.epoch)
        with pytest.raises(TimeoutError, match=f"'b' did not win election 'log-{log_name}'"):
            log_b.elect("b", timeout=0.5)
        assert not term.wait_lost(timeout=0.1)
        term.resign()
        assert term.wait_lost(timeout=30) and not term.is_leader
        second = log_b.elect("b", timeout=30)
        assert second.epoch > term.epoch
        assert log_a.current_leader() == ("b", second.epoch)
        second.resign()


async def test_leader_election_of_a_log_is_public_on_the_asyncio_api(
    cluster: LocalCluster, log_name: str
) -> None:
    async with (
        await walog.aio.connect(cluster.metadata_uri) as one,
        await walog.aio.connect(cluster.metadata_uri) as two,
    ):
        log_a, log_b = await one.open_log(log_name), await two.open_log(log_name)
        term = await log_a.elect("a")
        campaign = asyncio.create_task(log_b.elect("b"))
        assert await log_b.current_leader() == ("a", term.epoch)
        await term.resign()
        second = await asyncio.wait_for(campaign, 30)
        assert second.epoch > term.epoch and await log_a.current_leader() == ("b", second.epoch)
        await second.resign()


def test_the_standby_example_takes_over_after_a_sigkill_losing_nothing() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("WALOG_METADATA", None)
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "standby.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "leader killed with SIGKILL; the standby led after " in done.stdout
    assert " records acknowledged to the dead leader, 0 lost" in done.stdout
