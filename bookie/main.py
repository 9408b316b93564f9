"""``python -m bookie`` / ``walog bookie``: flags, start-up, serving, clean shutdown.

Start-up: connect to the metadata store, check the cookie (a wiped or foreign disk is
refused before anything reads or writes it), open the storage (journal replay), start gRPC,
report SERVING on the health service, register as available, start the ledger GC.

SIGTERM (or SIGINT, or the exit of the process ``--exit-with`` names): report NOT_SERVING,
unregister, stop accepting calls, let in-flight requests finish (``--drain-timeout``), close
the storage (sync + checkpoint), exit 0.
A start-up error prints one line on stderr and exits 1 (2 for bad flags).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import re
import signal
import ssl
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn

import structlog
from prometheus_client import CollectorRegistry

import walog._loop
from bookie.config import BookieConfig, parse_listen
from bookie.cookie import check_cookie
from bookie.disks import DiskMonitor
from bookie.exit_with import exit_with
from bookie.gc import LedgerCollector
from bookie.log_output import configure_logging
from bookie.metric_parts import BookieParts
from bookie.metrics import BookieCollector
from bookie.notices import DamageReports, DrainMark
from bookie.registration import Registration
from bookie.server.grpc_port import BookieServer
from bookie.server.health import BookieHealth, read_only_reason
from bookie.server.http import MetricsServer
from bookie.storage.engine import BookieCore
from walog._version import __version__
from walog.errors import WalogError
from walog.memory import keep_freed_memory
from walog.metadata import open_store
from walog.metadata.store import MetadataStore

log = structlog.get_logger("bookie")

_DEFAULTS = BookieConfig(data_dir=Path("."), listen="h:1", metadata="sqlite:///x")


class _BookieParser(argparse.ArgumentParser):
    """Bad flags: one line on stderr (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """A byte count such as ``4096``, ``64MiB``, ``64M`` or ``1.5GB`` (argparse type): K, M
    and G are powers of 1000, KiB, MiB and GiB of 1024.

    Raises:
        argparse.ArgumentTypeError: not a whole number of bytes.
    """
    match = _SIZE.match(text)
    if match is not None:
        number, prefix, binary = match.groups()
        base = 1024 if binary else 1000
        value = float(number) * base ** " kmg".index(prefix.lower() or " ")
        if value == int(value):
            return int(value)
    raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4096, 64MiB, 1GB)")


def format_size(size: int) -> str:
    """``size`` bytes for people: ``64 MiB``, ``512 KiB``, ``100 B``."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def build_parser(prog: str = "walog bookie") -> argparse.ArgumentParser:
    """The argument parser of the bookie command (flags map 1:1 onto BookieConfig).

    Args:
        prog: how the command was started (``walog bookie`` or ``python -m bookie``).
    """
    d = _DEFAULTS
    p = _BookieParser(
        prog=prog,
        description="Run a walog bookie: the storage server of ledger entries. "
        "See docs/bookies.md.",
    )
    p.add_argument("--version", action="version", version=f"walog bookie {__version__}")

    def tuned(group: argparse._ArgumentGroup, *rows: tuple[str, Any, Any, str]) -> None:
        for flag, kind, default, text in rows:
            shown = format_size(default) if kind is parse_size else default
            metavar = "SIZE" if kind is parse_size else "N"
            group.add_argument(
                flag, type=kind, default=default, metavar=metavar, help=f"{text} [{shown}]"
            )

    storage = p.add_argument_group("storage")
    storage.add_argument(
        "--data-dir", type=Path, required=True, help="entry logs, index and cookie"
    )
    storage.add_argument(
        "--cache-entry-logs",
        action="store_true",
        help="keep checkpointed entry-log pages in the page cache (default: drop once synced)",
    )
    tuned(
        storage,
        ("--max-entry-bytes", parse_size, d.max_entry_bytes, "largest entry payload accepted"),
        ("--entry-log-file-bytes", parse_size, d.entry_log_file_bytes,
         "an entry log rolls over at this size"),
        ("--checkpoint-interval", float, d.checkpoint_interval,
         "seconds between checkpoints (entry logs + index)"),
        ("--disk-usage-threshold", float, d.disk_usage_threshold,
         "used share of a data or journal disk that turns the bookie read-only"),
        ("--disk-usage-warn-threshold", float, d.disk_usage_warn_threshold,
         "used share of a disk that logs a warning"),
        ("--disk-usage-lwm-threshold", float, d.disk_usage_lwm_threshold,
         "used share all disks must fall below for a read-only bookie to take adds again"),
        ("--disk-check-interval", float, d.disk_check_interval,
         "seconds between measurements of disk usage"),
    )  # fmt: skip

    journal = p.add_argument_group("journal")
    journal.add_argument(
        "--journal-dir",
        type=Path,
        help="journal directory, ideally its own disk [DATA_DIR/journal]",
    )
    tuned(
        journal,
        ("--group-wait-ms", float, d.group_wait_ms, "longest wait of a journal group commit"),
        ("--group-max-bytes", parse_size, d.group_max_bytes,
         "a journal group commits at this size"),
        ("--volatile-flush-interval", float, d.volatile_flush_interval,
         "seconds between syncs of VOLATILE entries"),
    )  # fmt: skip

    network = p.add_argument_group("network")
    network.add_argument(
        "--listen", required=True, metavar="HOST:PORT", help="address, and the bookie's id"
    )
    network.add_argument(
        "--metadata", required=True, metavar="URI", help="zk://... or sqlite:///... store"
    )
    network.add_argument(
        "--rack", default=d.rack, metavar="NAME", help=f"rack or zone of this host [{d.rack}]"
    )
    network.add_argument(
        "--native-port",
        type=int,
        default=d.native_port,
        metavar="N",
        help="port of the native protocol on the --listen host (0: any free, -1: off) [0]",
    )
    network.add_argument(
        "--native-socket",
        default=d.native_socket,
        metavar="PATH",
        help="Unix socket of the native protocol for clients on this host "
        "('off': none) [DATA_DIR/native.sock]",
    )
    network.add_argument(
        "--metrics-port", type=int, metavar="N", help="port of /metrics, /healthz and /readyz"
    )
    tuned(
        network,
        ("--max-inflight-bytes", parse_size, d.max_inflight_bytes,
         "unanswered add bytes before TOO_MANY_REQUESTS"),
        ("--max-connections", int, d.max_connections,
         "native-protocol connections served at once; more are closed"),
        ("--drain-timeout", float, d.drain_timeout, "seconds granted to requests on SIGTERM"),
        ("--metadata-timeout", float, d.metadata_timeout, "metadata store timeout, seconds"),
    )  # fmt: skip

    security = p.add_argument_group("security")
    security.add_argument("--tls-cert", type=Path, metavar="F", help="PEM certificate chain")
    security.add_argument("--tls-key", type=Path, metavar="F", help="PEM private key")
    security.add_argument(
        "--tls-ca", type=Path, metavar="F", help="CA bundle: require client certificates"
    )
    security.add_argument(
        "--auth-token-file",
        type=Path,
        metavar="F",
        help="bearer token clients must send; SIGHUP reads it again (rotation)",
    )
    security.add_argument(
        "--auth-token-grace",
        type=float,
        default=d.auth_token_grace,
        metavar="N",
        help=f"seconds the previous token still works after a rotation [{d.auth_token_grace}]",
    )

    maintenance = p.add_argument_group("maintenance")
    maintenance.add_argument(
        "--allow-format",
        action="store_true",
        help="write a new cookie although disk and metadata disagree: the bookie then "
        "discards what it stored and acknowledged before (see --discard-instance)",
    )
    maintenance.add_argument(
        "--discard-instance",
        metavar="ID",
        help="with --allow-format, where the disk lost the incarnation the metadata store "
        "names: its instance id, confirming that its acknowledged entries are re-replicated",
    )
    maintenance.add_argument(
        "--rebuild-index",
        action="store_true",
        help="do not serve: rebuild the index of the stopped bookie in --data-dir from its "
        "entry logs, then exit (see docs/bookies.md)",
    )
    tuned(
        maintenance,
        ("--minor-compaction-threshold", float, d.minor_compaction_threshold,
         "minor compaction copies entry logs whose live share is below this"),
        ("--minor-compaction-interval", float, d.minor_compaction_interval,
         "seconds between minor compactions (0: off)"),
        ("--major-compaction-threshold", float, d.major_compaction_threshold,
         "major compaction copies entry logs whose live share is below this"),
        ("--major-compaction-interval", float, d.major_compaction_interval,
         "seconds between major compactions (0: off)"),
        ("--compaction-rate-bytes", parse_size, d.compaction_rate_bytes,
         "most bytes per second compaction copies"),
        ("--gc-interval", float, d.gc_interval, "seconds between scans for deleted ledgers"),
        ("--gc-grace", float, d.gc_grace, "seconds a written ledger is never collected"),
        ("--gc-stray-interval", float, d.gc_stray_interval,
         "seconds between scans for stray copies of closed ledgers (0: off)"),
        ("--gc-stray-grace", float, d.gc_stray_grace,
         "seconds a written copy is never taken for a stray one"),
    )  # fmt: skip
    maintenance.add_argument(
        "--log-level", default="INFO", choices=LOG_LEVELS, help="lowest level logged [INFO]"
    )
    maintenance.add_argument(
        "--exit-with",
        type=int,
        metavar="PID",
        help="stop cleanly, as on SIGTERM, once process PID exits (e.g. the harness that "
        "started the bookie)",
    )
    return p


def parse_config(
    argv: Sequence[str] | None = None, prog: str = "walog bookie"
) -> tuple[BookieConfig, str]:
    """Parse flags into a validated BookieConfig and the log level.

    Exits with status 2 and one error line on bad flags (argparse convention).
    """
    parser = build_parser(prog)
    args = vars(parser.parse_args(argv))
    level = args.pop("log_level")
    args.pop("rebuild_index")  # handled by main() before parsing
    try:
        return BookieConfig(**args), level
    except ValueError as exc:
        parser.error(str(exc))


async def run(config: BookieConfig, stop: asyncio.Event | None = None) -> None:
    """Run the bookie until ``stop`` is set (SIGTERM/SIGINT set it when not given; so does
    the exit of the process ``--exit-with`` names).

    Raises:
        ProcessLookupError: ``--exit-with`` names no process.
        CookieMismatchError: the disk does not match the cookie in the metadata store.
        OSError: the address cannot be bound or a directory is unusable.
        WalogError: the metadata store is unreachable.
    """
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    with exit_with(config.exit_with, stop):  # before anything else: refuses a missing PID
        store = await open_store(config.metadata, timeout=config.metadata_timeout)
        try:
            cookie = await check_cookie(store, config)
            log.info("cookie verified", instance_id=cookie.instance_id)
            core = await BookieCore.open(config.storage_config())
            try:
                await _serve(config, store, core, cookie.instance_id, stop)
            finally:
                await core.close()
        finally:
            await store.close()
    log.info("bookie stopped")


async def _serve(
    config: BookieConfig,
    store: MetadataStore,
    core: BookieCore,
    instance_id: str,
    stop: asyncio.Event,
) -> None:
    server = BookieServer(config, core, instance_id)
    if server.tokens is not None or server.certificates is not None:
        # Only a bookie process's main thread gets signals (in-process runs have none).
        with contextlib.suppress(ValueError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGHUP, functools.partial(_reload_secrets, server, config)
            )
    collector = LedgerCollector(
        core,
        store,
        server.service.last_write,
        interval=config.gc_interval,
        grace=config.gc_grace,
        bookie_id=config.bookie_id,
        stray_interval=config.gc_stray_interval,
        stray_grace=config.gc_stray_grace,
    )
    registration = Registration(store, config.bookie_id, instance_id, __version__, rack=config.rack)

    async def apply_mode(reason: str | None) -> None:
        core.read_only_reason = reason  # adds are refused first, then clients are told
        await registration.set_read_only(reason is not None)

    retiring = DrainMark(store, config.bookie_id)
    disks = DiskMonitor(
        (config.data_dir, config.journal_path),
        config.disk_thresholds(),
        config.disk_check_interval,
        lambda: core.storage_failure or retiring.reason,
        apply_mode,
    )
    retiring.on_change = disks.wake
    await retiring.start()
    # A failed journal write or sync, or a failed checkpoint, turns the bookie read-only at
    # once, not at the next measurement.
    core.journal.listeners.append(lambda _report, error: disks.wake() if error else None)
    core.checkpoints.failure_listeners.append(disks.wake)
    damage_reports = DamageReports(store, config.bookie_id)
    core.damage_listeners.append(damage_reports.report)
    await disks.check()  # a bookie that starts on a full disk registers read-only
    await server.start()
    metrics: MetricsServer | None = None
    health = BookieHealth(
        asyncio.get_running_loop(),
        is_registered=lambda: registration.registered,
        # From the stop signal on: the shutdown unregisters before it drains, and a bookie
        # on its way out must not read as one still starting.
        is_draining=lambda: stop.is_set() or server.service.draining.is_set(),
        read_only_reason=lambda: read_only_reason(core),
    )
    health_task = asyncio.create_task(health.watch(server.apply_state))
    tasks: list[asyncio.Task[None]] = []
    try:
        if config.metrics_port is not None:
            host, _ = parse_listen(config.listen)
            registry = CollectorRegistry(auto_describe=True)
            disk_dirs = {"data": config.data_dir, "journal": config.journal_path}
            info = {"version": __version__, "instance_id": instance_id}
            parts = BookieParts(server, core, collector, disks, asyncio.get_running_loop())
            registry.register(BookieCollector(parts, config.bookie_id, disk_dirs, info))
            metrics = MetricsServer(host, config.metrics_port, registry, health)
            metrics.start()
        if await _until_stopped(registration.register(), stop):
            tasks.append(asyncio.create_task(collector.run(stop)))
            tasks.append(asyncio.create_task(disks.run(stop)))
            log.info("bookie ready", bookie_id=config.bookie_id, port=server.port)
            await stop.wait()
        log.info("bookie stopping")
        await server.mark_not_serving()
        try:
            await registration.unregister()
        except WalogError as exc:
            # The record is liveness-bound: it goes when the session closes anyway.
            log.warning("unregister failed", error=str(exc))
        await server.drain()
    finally:
        health_task.cancel()
        retiring.stop()
        for task in tasks:
            task.cancel()
        if metrics is not None:
            metrics.close()
        await server.stop_now()


def _reload_secrets(server: BookieServer, config: BookieConfig) -> None:
    """SIGHUP: read the token file and the TLS files again (no secret is ever logged)."""
    if server.tokens is not None:
        try:
            changed = server.tokens.reload()
        except (OSError, ValueError) as exc:
            log.error("auth token not reloaded; the tokens in force stay", error=str(exc))
        else:
            grace = config.auth_token_grace
            if changed:
                log.info(
                    "auth token rotated; the previous one works until the grace ends", grace_s=grace
                )
            else:
                log.info("auth token file read again; unchanged")
    if server.certificates is not None:
        try:
            server.certificates.reload()
        except (OSError, ssl.SSLError) as exc:
            log.error("TLS files not reloaded; the certificate in force stays", error=str(exc))
        else:
            log.info("TLS certificate reloaded; new connections get it")


async def _until_stopped(step: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``step`` unless ``stop`` is set first (a SIGTERM while a restarted bookie waits
    for its predecessor's registration to expire); True when the step completed."""
    task = asyncio.create_task(step)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if task.done():
        task.result()  # re-raise a failure of the step
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


GC_THRESHOLDS = (20_000, 20, 20)
"""The bookie's garbage-collector thresholds (the interpreter's: 700, 10, 10).

Every add allocates a few objects per entry (its tuple in the write cache among them), so
with the default a young-generation collection ran every few hundred entries; measured
with ``walog bench --quick --only ledger``, collecting less often saves about 0.3 us of a
bookie's CPU per entry. The cycles a bookie makes (tasks, exceptions) are freed a little
later, nothing more."""


def main(argv: Sequence[str] | None = None, prog: str = "walog bookie") -> int:
    """Entry point of ``python -m bookie`` and ``walog bookie`` (``prog`` names the one
    used, in help and errors); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--rebuild-index" in args:
        from bookie.storage.rebuild import main as rebuild_main

        return rebuild_main(args)
    config, level = parse_config(args, prog)
    configure_logging(level, bookie_id=config.bookie_id)
    keep_freed_memory()  # frames come and go by the thousand a second (walog/memory.py)
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        walog._loop.run(run(config))
    except (WalogError, OSError, ValueError) as exc:
        log.error("bookie failed", error=str(exc), kind=type(exc).__name__)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = ["GC_THRESHOLDS", "build_parser", "main", "parse_config", "run"]
