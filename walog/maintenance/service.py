"""One maintenance pass over every log of a cluster, and the service that repeats it.

For each log (``list_logs``), whether a writer runs or not, a pass:

1. deletes what crashes left behind (pending deletions, ledgers of lost compare-and-swaps,
   sink ledgers no commit will link);
2. runs the archive job (``walog.spark.archive``) when the log's archive policy names a
   directory and its interval has passed, if pyspark can be imported (otherwise it says so
   in the log's report);
3. applies the retention policy stored with the log (``walog.log.log_config``): after the
   archive job, so that a ledger it archived is one ``require_archived`` retention may
   delete in the same pass, and whether or not the job failed (a failed job is named in
   the log's report, and the next pass runs it again whatever its interval);
4. measures the log for the metrics and ``walog status`` (``walog.log.health``).

A log whose maintenance fails is reported and left for the next pass; the other logs go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from walog._loggers import get_logger
from walog.errors import NoSuchLogError, WalogError
from walog.log import truncation
from walog.log.health import LogHealth, log_health
from walog.log.ledgers import LedgerClientLike
from walog.log.log_config import effective_config
from walog.log.log_metadata import LogMetadata, list_logs, read_log
from walog.log.retention_runner import deletes_anything
from walog.log.sink import collect_sink_orphans

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = get_logger(__name__)

NO_PYSPARK = "pyspark is not installed (pip install 'walog[spark]')"


@dataclasses.dataclass
class LogReport:
    """What one pass did to one log.

    Attributes:
        name: the log.
        deleted: ledgers retention deleted.
        orphans: leftover ledgers deleted.
        archive: what happened about the archive, in words ("" when the log has no
            archive policy).
        archived: ledgers the archive job archived.
        error: why the pass could not finish this log (None: it did).
        health: the log's figures after the pass (None when it could not be read).
    """

    name: str
    deleted: int = 0
    orphans: int = 0
    archive: str = ""
    archived: tuple[int, ...] = ()
    error: str | None = None
    health: LogHealth | None = None

    def as_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return dataclasses.asdict(self)

    def line(self) -> str:
        """The report as one line for people."""
        parts = [f"log {self.name!r}: deleted {self.deleted} ledger(s), {self.orphans} orphan(s)"]
        if self.archive:
            parts.append(f"archive: {self.archive}")
        if self.health is not None:
            parts.append(f"retention waits for: {self.health.retention_waiting_for}")
        if self.error is not None:
            parts.append(f"FAILED: {self.error}")
        return "; ".join(parts)


class Archiver(Protocol):
    """Runs the archive job of one log (blocking; called in a worker thread)."""

    def missing(self) -> str | None:
        """Why the job cannot run in this process (None: it can)."""

    def __call__(self, name: str, to: str) -> tuple[int, ...]:
        """Archive log ``name``'s closed ledgers under ``to``; return the ledgers archived."""


class SparkArchiver:
    """The Spark archive job (``walog.spark.archive.archive_log``), with one Spark session
    for the life of the service, started when a log first needs it."""

    def __init__(self, metadata_uri: str, master: str, timeout: float) -> None:
        self._uri = metadata_uri
        self._master = master
        self._timeout = timeout
        self._spark: SparkSession | None = None

    def missing(self) -> str | None:
        """Why the job cannot run here: pyspark cannot be imported (None: it can)."""
        return None if importlib.util.find_spec("pyspark") is not None else NO_PYSPARK

    def __call__(self, name: str, to: str) -> tuple[int, ...]:
        from walog.spark.archive import archive_log, spark_session

        if self._spark is None:
            self._spark = spark_session(self._master, "walog-maintain")
        result = archive_log(
            self._spark, self._uri, name, to, progress=False, timeout=self._timeout
        )
        return tuple(result.ledger_ids)

    def close(self) -> None:
        """Stop the Spark session, if one was started."""
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


async def maintain_log(
    client: LedgerClientLike,
    name: str,
    *,
    archiver: Archiver | None,
    archive_due: Callable[[str, float | None], bool],
    now: Callable[[], float] = time.time,
    archive_failed: Callable[[str], None] = lambda name: None,
) -> LogReport:
    """One pass over log ``name``; ``archive_due(name, interval_s)`` says whether its
    archive's interval has passed, ``archive_failed(name)`` hears that its archive job
    failed. Never raises for the log's own failures: they are in the report."""
    report = LogReport(name)
    store = client.ctx.store
    try:
        report.orphans = await truncation.collect_orphans(client, name)
        report.orphans += await truncation.scan_orphans(client, name)
        report.orphans += await collect_sink_orphans(client, name)
        meta, _ = await read_log(store, name)
        config = effective_config(meta)
        # Archive first: what it archives, require_archived retention may delete now; a
        # failed job still leaves retention to do the rest.
        archive_error = None
        if config.archive.to is not None:
            try:
                await _archive(report, meta, config.archive.to, archiver, archive_due, now)
            except NoSuchLogError:
                raise
            except Exception as exc:  # the archive job's own errors (Spark, py4j) among them
                archive_error = _failure(exc)
                archive_failed(name)
                log.warning("log archive failed", log=name, error=archive_error)
        if deletes_anything(config.retention):
            report.deleted = await truncation.enforce_retention(client, name, config.retention)
        meta, _ = await read_log(store, name)
        report.health = log_health(name, meta, config, now())
        report.error = archive_error
    except NoSuchLogError:
        report.error = "deleted meanwhile"
    except Exception as exc:
        report.error = _failure(exc)
        log.warning("log maintenance failed", log=name, error=report.error)
    return report


async def _archive(
    report: LogReport,
    meta: LogMetadata,
    to: str,
    archiver: Archiver | None,
    archive_due: Callable[[str, float | None], bool],
    now: Callable[[], float],
) -> None:
    """The archive step of a pass over log ``report.name`` (its record ``meta``) to
    directory ``to``, told in ``report.archive``."""
    name = report.name
    config = effective_config(meta)
    lag = log_health(name, meta, config, now()).archive_lag_ledgers
    if not lag:
        report.archive = "nothing to archive"
    elif not archive_due(name, config.archive.interval_s):
        report.archive = f"{lag} ledger(s) wait for the next run"
    elif archiver is None or archiver.missing() is not None:
        why = NO_PYSPARK if archiver is None else archiver.missing()
        report.archive = f"skipped ({lag} ledger(s) to archive to {to}): {why}"
        log.warning("archive skipped", log=name, to=to, reason=why)
    else:
        report.archived = await asyncio.to_thread(archiver, name, to)
        shown = ", ".join(map(str, report.archived)) or "none"
        report.archive = f"archived ledgers {shown} to {to}"


def _failure(exc: Exception) -> str:
    """Why a log's maintenance failed, in one line: the type, then the message (its first
    line only for foreign errors, such as Spark's and py4j's many-line ones)."""
    if isinstance(exc, WalogError | ValueError | OSError):
        return f"{type(exc).__name__}: {exc}"
    first = next(iter(str(exc).strip().splitlines()), "")
    return f"{type(exc).__name__}: {first}"


class Maintainer:
    """Passes over every log of the cluster ``client`` reaches.

    Args:
        client: the cluster's client.
        archiver: what runs the archive job (None: no archiving in this process).
        once: every archive is due at each pass (``walog maintain --once``); otherwise
            a log's archive runs once per its policy's ``interval_s``, and again at the
            next pass after a run that failed.
        clock: Unix time (for tests).
    """

    def __init__(
        self,
        client: LedgerClientLike,
        *,
        archiver: Archiver | None = None,
        once: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._archiver = archiver
        self._once = once
        self._clock = clock
        self._last_archive: dict[str, float] = {}

    def _archive_due(self, name: str, interval_s: float | None) -> bool:
        now = self._clock()
        last = self._last_archive.get(name)
        if self._once or interval_s is None or last is None or now - last >= interval_s:
            self._last_archive[name] = now
            return True
        return False

    def _archive_failed(self, name: str) -> None:
        # The failed run counts for nothing: the next pass tries again, not the next
        # interval (which may be hours).
        self._last_archive.pop(name, None)

    async def pass_once(self) -> list[LogReport]:
        """One pass over every log; a report per log, in name order."""
        reports = []
        for name in await list_logs(self._client.ctx.store):
            report = await maintain_log(
                self._client,
                name,
                archiver=self._archiver,
                archive_due=self._archive_due,
                now=self._clock,
                archive_failed=self._archive_failed,
            )
            if report.error != "deleted meanwhile":
                reports.append(report)
        return reports

    async def run(
        self,
        stop: asyncio.Event,
        interval_s: float,
        on_pass: Callable[[Sequence[LogReport], float], None],
    ) -> None:
        """Pass every ``interval_s`` seconds until ``stop`` is set; ``on_pass(reports,
        seconds)`` after each pass. A pass that fails as a whole (the metadata store out of
        reach) is logged and the next one tries again."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                reports = await self.pass_once()
            except WalogError as exc:
                log.warning("maintenance pass failed", error=str(exc))
            else:
                on_pass(reports, time.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


__all__ = [
    "NO_PYSPARK",
    "Archiver",
    "LogReport",
    "Maintainer",
    "SparkArchiver",
    "maintain_log",
]
