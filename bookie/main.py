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
import dataclasses
import functools
import gc
import os
import re
import signal
import ssl
import sys
import typing
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import structlog

import walog._loop
from bookie.config import GROUPS, BookieConfig, parse_listen
from bookie.cookie import check_cookie
from bookie.disks import (
    DiskMonitor,
    check_journal_disk,
    entry_log_bytes_for,
    free_bytes,
    reserve_bytes,
)
from bookie.exit_with import exit_with
from bookie.gc import LedgerCollector
from bookie.log_output import configure_logging
from bookie.metric_parts import BookieParts
from bookie.notices import DamageReports, DrainMark
from bookie.registration import Registration
from bookie.server.grpc_port import BookieServer
from bookie.server.health import BookieHealth, read_only_reason
from bookie.space import Reclaimer
from bookie.storage.config import StorageConfig
from bookie.storage.engine import BookieCore
from walog._tasks import cancel_and_wait
from walog._version import __version__
from walog.config_file import ENV_METADATA, add_config_flags, example_file, resolve
from walog.errors import WalogError

if TYPE_CHECKING:
    from bookie.server.http import MetricsServer
from walog.memory import keep_freed_memory
from walog.metadata import open_store
from walog.metadata.store import MetadataStore
from walog.settings import HELP, add_deprecated_flag, flag_of

log = structlog.get_logger("bookie")


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


_RENAMED: dict[str, tuple[str, Callable[[Any], Any] | None]] = {
    "--group-wait-ms": ("--group-wait-s", lambda ms: ms / 1000.0),
    "--volatile-flush-interval": ("--volatile-flush-interval-s", None),
    "--checkpoint-interval": ("--checkpoint-interval-s", None),
    "--minor-compaction-interval": ("--minor-compaction-interval-s", None),
    "--major-compaction-interval": ("--major-compaction-interval-s", None),
    "--gc-interval": ("--gc-interval-s", None),
    "--gc-grace": ("--gc-grace-s", None),
    "--gc-stray-interval": ("--gc-stray-interval-s", None),
    "--gc-stray-grace": ("--gc-stray-grace-s", None),
    "--disk-check-interval": ("--disk-check-interval-s", None),
    "--drain-timeout": ("--drain-timeout-s", None),
    "--metadata-timeout": ("--metadata-timeout-s", None),
    "--auth-token-grace": ("--auth-token-grace-s", None),
}
"""Flags renamed to carry their unit, by old spelling: the new flag, and how an old value
converts where the unit changed. The old spellings still work (hidden, with a warning on
stderr); the configuration file knows only the new keys."""

ENVIRONMENT_ONLY = {
    "WALOG_EVENT_LOOP": "the event loop: uvloop (the default where installed) or asyncio",
    "WALOG_PURE_PYTHON": "1: the pure-Python journal and storage paths instead of the compiled",
}
"""The environment variables a bookie reads that are no flag, with what they choose."""

_SKIP = ("rebuild_index",)
"""Flags that are no setting (a command)."""


def _environment() -> dict[str, str]:
    """The environment variable of each setting that has one, by field name."""
    fields = dataclasses.fields(BookieConfig)
    return {field.name: field.metadata["env"] for field in fields if "env" in field.metadata}


def _add_flag(group: argparse._ArgumentGroup, field: dataclasses.Field[Any], hint: Any) -> None:
    """The flag of one BookieConfig field: its type from the annotation and the unit in the
    name (``_s`` seconds, ``_bytes`` a size), its default and help text from the field."""
    meta, name = field.metadata, field.name
    required = field.default is dataclasses.MISSING
    default: Any = None if required else field.default
    kind = next((t for t in typing.get_args(hint) if t is not type(None)), hint)
    text = meta[HELP].replace("%", "%%")
    if kind is bool:
        group.add_argument(flag_of(name), action="store_true", help=text)
        return
    if name.endswith("_bytes"):
        kind, metavar, shown = parse_size, "SIZE", format_size(default)
    elif name.endswith("_s"):
        metavar, shown = "S", f"{default:g} s"
    elif kind is Path:
        metavar, shown = ("DIR" if name.endswith("_dir") else "F"), default
    else:
        metavar, shown = "N", default
    shown = "required" if required else meta.get("shown", shown)
    typed: dict[str, Any] = {} if kind is str else {"type": kind}
    group.add_argument(
        flag_of(name),
        **typed,
        default=default,
        required=required,
        metavar=meta.get("metavar", metavar),
        help=f"{text} [{shown}]",
    )


def build_parser(prog: str = "walog bookie") -> argparse.ArgumentParser:
    """The argument parser of the bookie command: one flag per BookieConfig field, named,
    typed, defaulted and described by the field (``bookie/config.py``), plus ``--config``,
    ``--print-config``, ``--log-level`` and ``--rebuild-index``.

    Args:
        prog: how the command was started (``walog bookie`` or ``python -m bookie``).
    """
    p = _BookieParser(
        prog=prog,
        description="Run a walog bookie: the storage server of ledger entries. "
        "See docs/bookies.md.",
        epilog="Environment: "
        f"{ENV_METADATA} gives --metadata where neither the flag nor the file does; "
        + "; ".join(f"{name}: {text}" for name, text in ENVIRONMENT_ONLY.items())
        + ".",
    )
    p.add_argument("--version", action="version", version=f"walog bookie {__version__}")
    groups = {name: p.add_argument_group(name) for name in GROUPS}
    hints = typing.get_type_hints(BookieConfig)
    for field in dataclasses.fields(BookieConfig):
        _add_flag(groups[field.metadata["group"]], field, hints[field.name])
    groups["maintenance"].add_argument(
        "--rebuild-index",
        action="store_true",
        help="do not serve: rebuild the index of the stopped bookie in --data-dir from its "
        "entry logs, then exit (see docs/bookies.md)",
    )
    groups["maintenance"].add_argument(
        "--log-level", default="INFO", choices=LOG_LEVELS, help="lowest level logged [INFO]"
    )
    add_config_flags(p)
    for old, (new, convert) in _RENAMED.items():
        add_deprecated_flag(p, old, new, convert)
    return p


def parse_config(
    argv: Sequence[str] | None = None,
    prog: str = "walog bookie",
    environ: Mapping[str, str] | None = None,
) -> tuple[BookieConfig, str]:
    """A validated BookieConfig and the log level, from the flags, the environment and the
    ``--config`` file (in that order of precedence; walog/config_file.py).

    With ``--print-config``, prints the effective settings and where each came from, and
    exits with status 0. Exits with status 2 and one error line on bad flags or a bad file
    (argparse convention).
    """
    parser = build_parser(prog)
    resolved = resolve(
        parser,
        list(sys.argv[1:] if argv is None else argv),
        environment=_environment(),
        environ=environ,
        skip=_SKIP,
    )
    values = resolved.values()
    level = values.pop("log_level")
    try:
        config = BookieConfig(**values)
    except ValueError as exc:
        resolved.error(str(exc))
    if resolved.print_config:
        env = os.environ if environ is None else environ
        notes = ["", "# -- environment only --"]
        notes += [f"# {name}: {env.get(name, '(not set)')}" for name in ENVIRONMENT_ONLY]
        print(resolved.render(prog) + "\n".join(notes), flush=True)
        parser.exit(0)
    return config, level


EXAMPLE_SAMPLES: dict[str, object] = {
    "data-dir": "/var/lib/walog/bookie",
    "listen": "bookie1.example.com:3181",
    "metadata": "zk://zk1.example.com:2181,zk2.example.com:2181,zk3.example.com:2181/walog",
}
"""The values the example file sets for the settings a bookie must be given."""

EXAMPLE_HINTS: dict[str, object] = {
    "journal-dir": "/var/lib/walog/journal",
    "metrics-port": 9101,
    "tls-cert": "/etc/walog/tls/bookie.crt",
    "tls-key": "/etc/walog/tls/bookie.key",
    "tls-ca": "/etc/walog/tls/ca.crt",
    "auth-token-file": "/etc/walog/bookie.token",
    "discard-instance": "INSTANCE-ID-FROM-THE-REFUSAL",
    "exit-with": 4242,
}
"""The values the example file shows, commented out, for the settings off by default."""


def example_config() -> str:
    """The example configuration file shipped as docs/ops/bookie.toml: every key with its
    help text and its default, built from the flags (so it cannot drift from them).

    Regenerate it with ``python -c 'import bookie.main as m; print(m.example_config(),
    end="")' > docs/ops/bookie.toml``.
    """
    return example_file(
        build_parser("python -m bookie"),
        title=[
            "An example configuration of a walog bookie: every key, its help text and its",
            "default. Run: python -m bookie --config /etc/walog/bookie.toml",
            "",
            "Keys are the flags' names without the dashes; a flag given on the command line",
            f"wins over the file, and so does {ENV_METADATA} over its key. Units are in the",
            'names: _s seconds, _bytes bytes (an integer or a size such as "64MiB").',
            "A commented-out key is off unless given (its value an example). python -m bookie",
            "--config FILE --print-config shows the effective settings and where each came from.",
            "This file is generated from the flags: bookie.main.example_config().",
        ],
        samples=EXAMPLE_SAMPLES,
        hints=EXAMPLE_HINTS,
        skip=_SKIP,
    )


async def run(config: BookieConfig, stop: asyncio.Event | None = None) -> None:
    """Run the bookie until ``stop`` is set (SIGTERM/SIGINT set it when not given; so does
    the exit of the process ``--exit-with`` names).

    Raises:
        ProcessLookupError: ``--exit-with`` names no process.
        CookieMismatchError: the disk does not match the cookie in the metadata store.
        OSError: the address cannot be bound or a directory is unusable.
        JournalDiskTooSmallError: the journal's disk cannot hold two journal files.
        WalogError: the metadata store is unreachable.
    """
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    with exit_with(config.exit_with, stop):  # before anything else: refuses a missing PID
        check_journal_disk(config.journal_path, config.journal_file_bytes)
        store = await open_store(config.metadata, timeout=config.metadata_timeout_s)
        try:
            cookie = await check_cookie(store, config)
            log.info("cookie verified", instance_id=cookie.instance_id)
            core = await BookieCore.open(_storage_config(config))
            try:
                await _serve(config, store, core, cookie.instance_id, stop)
            finally:
                await core.close()
        finally:
            await store.close()
    log.info("bookie stopped")


def _storage_config(config: BookieConfig) -> StorageConfig:
    """The storage settings, with entry logs no larger than half the data disk's reserve
    (so a full disk can always compact; a warning says when the flag was lowered)."""
    storage = config.storage_config()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    reserve = reserve_bytes(config.data_dir, config.disk_thresholds())
    size = entry_log_bytes_for(storage.entry_log_file_bytes, reserve)
    if size == storage.entry_log_file_bytes:
        return storage
    log.warning(
        "entry logs smaller than --entry-log-file-bytes: compacting a log must fit in the "
        "data disk's reserve above --disk-usage-threshold",
        entry_log_file_bytes=size,
        configured=storage.entry_log_file_bytes,
        reserve_bytes=reserve,
    )
    return dataclasses.replace(storage, entry_log_file_bytes=size)


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
        interval=config.gc_interval_s,
        grace=config.gc_grace_s,
        bookie_id=config.bookie_id,
        stray_interval=config.gc_stray_interval_s,
        stray_grace=config.gc_stray_grace_s,
    )
    registration = Registration(
        store,
        config.bookie_id,
        instance_id,
        __version__,
        rack=config.rack,
        max_entry_bytes=config.max_entry_bytes,
    )

    async def apply_mode(reason: str | None) -> None:
        core.read_only_reason = reason  # adds are refused first, then clients are told
        await registration.set_read_only(reason is not None)

    # Compaction takes a log only if its live bytes fit in the data disk's free space.
    core.compactor.room = functools.partial(free_bytes, config.data_dir)
    major = config.major_compaction_threshold
    reclaimer = Reclaimer(
        collector.collect_once,
        lambda: core.compactor.compact(major, seal_filling=True),
        gap_s=config.disk_check_interval_s,
    )
    retiring = DrainMark(store, config.bookie_id)
    disks = DiskMonitor(
        (config.data_dir, config.journal_path),
        config.disk_thresholds(),
        config.disk_check_interval_s,
        lambda: core.storage_failure or retiring.reason,
        apply_mode,
        on_pressure=reclaimer.wake,
        unwritten_bytes=lambda: core.checkpoints.unwritten_bytes,
    )
    retiring.on_change = disks.wake
    await retiring.start()
    # A failed journal write or sync, or a failed checkpoint, turns the bookie read-only at
    # once, not at the next measurement; what the journal writes brings the next one closer.
    core.journal.listeners.append(
        lambda report, error: disks.wake() if error else disks.journaled(report.byte_count)
    )
    core.checkpoints.failure_listeners.append(disks.wake)
    damage_reports = DamageReports(store, config.bookie_id)
    core.damage.listeners.append(damage_reports.report)
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
            parts = BookieParts(server, core, collector, disks, asyncio.get_running_loop())
            metrics = _start_metrics(config, config.metrics_port, parts, instance_id, health)
        if await _until_stopped(registration.register(), stop):
            tasks.append(asyncio.create_task(collector.run(stop)))
            tasks.append(asyncio.create_task(disks.run(stop)))
            tasks.append(asyncio.create_task(reclaimer.run()))
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


def _start_metrics(
    config: BookieConfig, port: int, parts: BookieParts, instance_id: str, health: BookieHealth
) -> MetricsServer:
    """Serve ``/metrics`` and the health paths on ``port``. Imported here: a bookie without
    a metrics port never loads the Prometheus client (a tenth of its start-up)."""
    from prometheus_client import CollectorRegistry

    from bookie.metrics import BookieCollector
    from bookie.server.http import MetricsServer

    host, _ = parse_listen(config.listen)
    registry = CollectorRegistry(auto_describe=True)
    disk_dirs = {"data": config.data_dir, "journal": config.journal_path}
    info = {"version": __version__, "instance_id": instance_id}
    registry.register(BookieCollector(parts, config.bookie_id, disk_dirs, info))
    metrics = MetricsServer(host, port, registry, health)
    metrics.start()
    return metrics


def _reload_secrets(server: BookieServer, config: BookieConfig) -> None:
    """SIGHUP: read the token file and the TLS files again (no secret is ever logged)."""
    if server.tokens is not None:
        try:
            changed = server.tokens.reload()
        except (OSError, ValueError) as exc:
            log.error("auth token not reloaded; the tokens in force stay", error=str(exc))
        else:
            grace = config.auth_token_grace_s
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
    await cancel_and_wait(task)
    return False


def _rebuild_args(args: list[str], prog: str) -> list[str]:
    """The flags of ``--rebuild-index``: as given, or the settings it needs from the
    ``--config`` file."""
    if not any(a == "--config" or a.startswith("--config=") for a in args):
        return args
    resolved = resolve(build_parser(prog), args, environment=_environment(), skip=_SKIP)
    values = resolved.values()
    rebuild = ["--rebuild-index", "--data-dir", str(values["data_dir"])]
    if resolved.sources["max_entry_bytes"] != "default":
        rebuild += ["--max-entry-bytes", str(values["max_entry_bytes"])]
    return rebuild


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

        return rebuild_main(_rebuild_args(args, prog))
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


__all__ = [
    "ENVIRONMENT_ONLY",
    "EXAMPLE_HINTS",
    "EXAMPLE_SAMPLES",
    "GC_THRESHOLDS",
    "build_parser",
    "example_config",
    "main",
    "parse_config",
    "run",
]
