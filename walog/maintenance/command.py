"""``walog maintain``: keep every log to its stored settings, once or as a service.

Each pass applies every log's stored retention, deletes leftover ledgers and runs the
archive job where a log's archive policy asks for it (walog/maintenance/service.py); logs
with no live writer included. Several services may run: every step is a compare-and-swap
that a concurrent one makes harmless.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence

import prometheus_client
from prometheus_client import CollectorRegistry

import walog._loop
import walog.aio
from walog.autorecovery.command import parse_listen
from walog.cli.options import (
    CommandParser,
    add_connection_options,
    connect_options,
    connect_service,
)
from walog.config_file import ENV_METADATA, add_config_flags, example_file, resolve
from walog.errors import WalogError
from walog.maintenance.metrics import MaintainMetrics
from walog.maintenance.service import LogReport, Maintainer, SparkArchiver

DEFAULT_INTERVAL_S = 60.0


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``walog maintain``."""
    parser = CommandParser(
        prog="walog maintain",
        description="For every log, apply its stored retention, delete leftover ledgers and "
        "run the archive job its archive policy asks for (with Spark, when pyspark is "
        "installed); then print one line per log. Without --once, a pass every --interval-s "
        "seconds until SIGTERM or SIGINT.",
    )
    add_connection_options(parser)
    parser.add_argument(
        "--once", action="store_true", help="one pass, then exit (1 if a log failed)"
    )
    parser.add_argument(
        "--interval-s",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between passes [{DEFAULT_INTERVAL_S:g}]",
    )
    parser.add_argument(
        "--spark-master",
        default="local[*]",
        metavar="URL",
        help="the Spark master URL the archive job runs on",
    )
    parser.add_argument("--json", action="store_true", help="print each log's report as JSON")
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus metrics per log at http://HOST:PORT/metrics (service only)",
    )
    add_config_flags(parser)
    return parser


def example_config() -> str:
    """An example configuration file of the service: every key with its help and default."""
    return example_file(
        build_parser(),
        title=[
            "An example configuration of walog maintain: every key, its help text and its",
            "default. Run: walog maintain --config /etc/walog/maintain.toml",
            "",
            "Keys are the flags' names without the dashes; a flag given on the command line",
            f"wins over the file, and so does {ENV_METADATA} over its key.",
        ],
        samples={"metadata": "zk://zk1.example.com:2181,zk2.example.com:2181/walog"},
        hints={
            "tls-ca": "/etc/walog/tls/ca.crt",
            "tls-cert": "/etc/walog/tls/maintain.crt",
            "tls-key": "/etc/walog/tls/maintain.key",
            "auth-token-file": "/etc/walog/maintain.token",
            "metrics-listen": "0.0.0.0:9103",
        },
    )


def _print(reports: Sequence[LogReport], as_json: bool) -> None:
    for report in reports:
        print(json.dumps(report.as_json(), sort_keys=True) if as_json else report.line())
    if not as_json:
        deleted = sum(r.deleted for r in reports)
        failed = sum(1 for r in reports if r.error is not None)
        print(f"{len(reports)} log(s), {deleted} ledger(s) deleted, {failed} failed", flush=True)
    sys.stdout.flush()


async def _run(args: argparse.Namespace) -> int:
    if args.once:
        client = await walog.aio.connect(args.metadata, **connect_options(args))
        async with client:
            archiver = SparkArchiver(args.metadata, args.spark_master, args.timeout)
            try:
                reports = await Maintainer(client, archiver=archiver, once=True).pass_once()
            finally:
                await asyncio.to_thread(archiver.close)
            _print(reports, args.json)
            return 1 if any(r.error is not None for r in reports) else 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    service = await connect_service(args, stop, "maintain")
    if service is None:
        return 0  # stopped before the metadata store could be reached
    async with service as client:
        archiver = SparkArchiver(args.metadata, args.spark_master, args.timeout)
        try:
            maintainer = Maintainer(client, archiver=archiver, once=False)
            metrics = _serve_metrics(args.metrics_listen) if args.metrics_listen else None

            def on_pass(reports: Sequence[LogReport], seconds: float) -> None:
                if metrics is not None:
                    metrics.record(reports, seconds)
                _print(reports, args.json)

            await maintainer.run(stop, args.interval_s, on_pass)
            return 0
        finally:
            await asyncio.to_thread(archiver.close)


def _serve_metrics(listen: str) -> MaintainMetrics:
    host, port = parse_listen(listen)
    registry = CollectorRegistry()
    metrics = MaintainMetrics()
    registry.register(metrics)
    prometheus_client.start_http_server(port, addr=host, registry=registry)
    return metrics


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``walog maintain``; returns the exit status (0 done, 1 a log or the
    service failed, 2 bad arguments or a bad ``--config`` file)."""
    resolved = resolve(
        build_parser(),
        list(sys.argv[1:] if argv is None else argv),
        environment={"metadata": ENV_METADATA},
    )
    args = resolved.args
    if not args.metadata:
        resolved.error(f"--metadata URI is required (or set {ENV_METADATA})")
    if args.interval_s <= 0 or args.timeout <= 0:
        resolved.error("--interval-s and --timeout must be > 0")
    if args.metrics_listen and args.once:
        resolved.error("--metrics-listen is for the service (leave out --once)")
    if args.metrics_listen:
        try:
            parse_listen(args.metrics_listen)
        except ValueError as exc:
            resolved.error(f"--metrics-listen: {exc}")
    if resolved.print_config:
        print(resolved.render("walog maintain"), end="")
        return 0
    try:
        return walog._loop.run(_run(args))
    except (WalogError, ValueError, OSError) as exc:
        print(f"walog maintain: error: {exc}", file=sys.stderr)
        return 1


__all__ = ["example_config", "main"]
