"""Settings stored with a log: set at creation, used by every process that opens the log,
changed by compare-and-swap; the writer applies the stored retention after its rolls."""

from __future__ import annotations

import pytest

import walog
import walog.aio
from walog.log.log_metadata import update_log
from walog.testing import LocalCluster


def _retained(retention: walog.RetentionPolicy) -> walog.LogConfig:
    return walog.LogConfig(roll=walog.RollPolicy(max_entries=2), retention=retention)


def test_a_log_with_stored_retention_loses_old_ledgers_as_its_writer_rolls(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        client.create_log(log_name, _retained(walog.RetentionPolicy(max_age=1e-6)))
        log = client.open_log(log_name)  # no policy given: the stored ones apply
        assert log.config.retention.max_age == 1e-6 and log.config.roll.max_entries == 2
        first = log.segments()[0].ledger_id if log.segments() else None
        with log.open_writer() as writer:
            for i in range(9):
                writer.append(b"record %d" % i)  # one entry each: a roll every two
            writer.roll()  # the last roll recorded its ledger closed before this returns
            writer.wait_retention()
            segments = log.segments()
            assert len(segments) == 1 and segments[0].ledger_id == writer.async_writer.ledger_id
            runner = writer.async_writer.after_roll
            assert runner is not None and runner.failures == 0  # type: ignore[attr-defined]
            writer.append(b"still writable")
        gone = [i for i in range(first or 0, segments[0].ledger_id) if i]
        for ledger_id in gone[:3]:
            with pytest.raises(walog.NoSuchLedgerError):
                client.ledger_metadata(ledger_id)


async def test_the_asyncio_api_creates_a_log_whose_writer_applies_its_retention(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        config = _retained(walog.RetentionPolicy(max_age=1e-6))
        log = await client.create_log(log_name, config)
        assert await log.stored_config() == config
        writer = await log.open_writer()
        for i in range(6):
            await writer.append(b"%d" % i)
        await writer.roll()
        runner = writer.after_roll
        assert runner is not None
        await writer.wait_retention()
        assert [s.ledger_id for s in await log.segments()] == [writer.ledger_id]
        await writer.close()


def test_a_process_giving_other_settings_than_stored_is_refused_naming_them(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        stored = walog.RetentionPolicy(max_age=3600.0)
        client.create_log(log_name, walog.LogConfig(retention=stored))
        with pytest.raises(ValueError, match=r"retention\.max_age: stored 3600\.0, given 60\.0"):
            client.open_log(log_name, retention=walog.RetentionPolicy(max_age=60))
        with pytest.raises(ValueError, match="write_quorum: stored 3, given 2"):
            client.open_log(log_name, write_quorum=2)
        with pytest.raises(ValueError, match="max_entry_bytes"):
            client.open_log(log_name, writer_config=walog.LogWriterConfig(max_entry_bytes=1 << 23))
        smaller = walog.LogWriterConfig(max_entry_bytes=4096)  # a writer may batch smaller
        assert client.open_log(log_name, writer_config=smaller).async_log.writer_config == smaller
        with pytest.raises(ValueError, match=r"retention\.max_age"):
            client.create_log(log_name, walog.LogConfig())
        assert (
            client.open_log(log_name, retention=stored, write_quorum=3).config.retention == stored
        )
        override = client.open_log(
            log_name, retention=walog.RetentionPolicy(max_age=60), override_config=True
        )
        assert override.config.retention.max_age == 60.0
        assert client.open_log(log_name).stored_config().retention == stored


def test_stored_settings_change_by_key_and_a_bad_one_stores_nothing(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.create_log(log_name)
        assert log.configure({"retention.max_bytes": "1000", "roll.max_age": 60}).retention == (
            walog.RetentionPolicy(max_bytes=1000)
        )
        before = log.metadata()
        for bad in ({"retention.max_byte": "1"}, {"ack_quorum": "9"}, {"roll.max_age": "x"}):
            with pytest.raises(ValueError):
                log.configure(bad)
        assert log.metadata() == before
        assert client.open_log(log_name).config.roll.max_age == 60.0


async def test_a_log_created_before_logs_kept_settings_opens_as_it_did(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        await client.open_log(log_name)
        await update_log(client.ctx.store, log_name, lambda meta: meta.replace(config=None))
        log = await client.open_log(log_name, ensemble_size=2, write_quorum=2, ack_quorum=2)
        assert log.ledger_options.ensemble_size == 2
        assert (await log.stored_config()) == walog.LogConfig()
        writer = await log.open_writer()
        await writer.append(b"x")
        await writer.close()
        assert (await log.metadata()).config is None  # nobody stored settings for it


async def test_a_failed_retention_run_is_counted_and_never_fails_an_append(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.create_log(log_name, _retained(walog.RetentionPolicy(max_age=1e-6)))
        writer = await log.open_writer()
        # Settings this version cannot read, stored behind the running writer's back.
        await update_log(
            client.ctx.store, log_name, lambda meta: meta.replace(config={"retention": 1})
        )
        for i in range(4):
            await writer.append(b"%d" % i)
        await writer.roll()
        runner = writer.after_roll
        assert runner is not None
        await writer.wait_retention()
        assert runner.failures >= 1 and runner.runs == 0  # type: ignore[attr-defined]
        assert len(await log.segments()) > 1  # nothing deleted
        await writer.append(b"appends go on")
        await writer.close()
