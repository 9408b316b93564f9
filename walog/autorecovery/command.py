"""``walog autorecovery``: re-replicate the ledgers of lost bookies, once or as a daemon.

Several daemons may run: one is elected auditor, all of them repair (walog/autorecovery/
daemon.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Sequence

import prometheus_client
from prometheus_client import CollectorRegistry

import walog._loop
import walog.aio
from walog.autorecovery.daemon import Daemon
from walog.autorecovery.metrics import AutorecoveryMetrics
from walog.autorecovery.replicate import recover
from walog.autorecovery.report import Report
from walog.cli.options import (
    CommandParser,
    add_connection_options,
    connect_options,
    connect_service,
)
from walog.config_file import ENV_METADATA, add_config_flags, example_file, resolve
from walog.errors import WalogError
from walog.ledger.placement import POLICIES, placement_policy

DEFAULT_INTERVAL_S = 60.0
DEFAULT_LOST_AFTER_S = 300.0


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``walog autorecovery``."""
    parser = CommandParser(
        prog="walog autorecovery",
        description="Re-replicate the ledger fragments that name lost bookies: copy their "
        "entries from the surviving bookies to replacements, then swap the replacements "
        "into the ledger metadata. Without --once, runs a pass every --interval seconds and "
        "treats a bookie as lost once it has been unavailable for --lost-after seconds.",
    )
    add_connection_options(parser)
    parser.add_argument(
        "--once",
        action="store_true",
        help="one pass, treating every unavailable bookie as lost; exit 1 if anything "
        "could not be repaired",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between passes [{DEFAULT_INTERVAL_S:g}]",
    )
    parser.add_argument(
        "--lost-after",
        type=float,
        default=DEFAULT_LOST_AFTER_S,
        help="seconds a bookie must stay unavailable before its fragments are repaired "
        f"(a restart is not a loss) [{DEFAULT_LOST_AFTER_S:g}]",
    )
    parser.add_argument(
        "--password",
        action="append",
        default=[],
        help="a ledger password to try (repeatable; the empty password is always tried)",
    )
    parser.add_argument(
        "--verify-entries",
        action="store_true",
        help="also check that every available bookie holds every entry of its share of each "
        "fragment (it lists them from its index), and copy back each entry it lacks",
    )
    parser.add_argument(
        "--verify-percent",
        type=_percent,
        default=0.0,
        metavar="P",
        help="with --verify-entries, for bookies of a version that cannot list their entries "
        "(checked by reading the first and last entry of each share): also read P %% of "
        "the other entries, picked at random each pass (100: every entry) [0]",
    )
    parser.add_argument(
        "--placement",
        choices=list(POLICIES),
        default=next(iter(POLICIES)),
        help="how replacements are chosen: the rack-aware rule the writers use, or at "
        "random [%(default)s]",
    )
    parser.add_argument("--json", action="store_true", help="print each pass as one JSON object")
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus metrics of the passes at http://HOST:PORT/metrics (daemon only)",
    )
    add_config_flags(parser)
    return parser


def example_config() -> str:
    """The example configuration file shipped as docs/ops/autorecovery.toml: every key with
    its help text and its default, built from the flags.

    Regenerate it with ``python -c 'import walog.autorecovery.command as m;
    print(m.example_config(), end="")' > docs/ops/autorecovery.toml``.
    """
    return example_file(
        build_parser(),
        title=[
            "An example configuration of the walog autorecovery daemon: every key, its help",
            "text and its default. Run: walog autorecovery --config /etc/walog/autorecovery.toml",
            "",
            "Keys are the flags' names without the dashes; a flag given on the command line",
            f"wins over the file, and so does {ENV_METADATA} over its key. A commented-out",
            "key is off unless given (its value an example). walog autorecovery --config",
            "FILE --print-config shows the effective settings and where each came from.",
            "This file is generated from the flags: walog.autorecovery.command.example_config().",
        ],
        samples=EXAMPLE_SAMPLES,
        hints=EXAMPLE_HINTS,
    )


EXAMPLE_SAMPLES: dict[str, object] = {
    "metadata": "zk://zk1.example.com:2181,zk2.example.com:2181,zk3.example.com:2181/walog",
}
"""The values the example file sets instead of the defaults."""

EXAMPLE_HINTS: dict[str, object] = {
    "tls-ca": "/etc/walog/tls/ca.crt",
    "tls-cert": "/etc/walog/tls/autorecovery.crt",
    "tls-key": "/etc/walog/tls/autorecovery.key",
    "auth-token-file": "/etc/walog/autorecovery.token",
    "metrics-listen": "0.0.0.0:9102",
}
"""The values the example file shows, commented out, for the settings off by default."""


def _print(report: Report, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_json(), sort_keys=True), flush=True)
        return
    for damage, replacements in report.repaired:
        swaps = ", ".join(f"{damage.ensemble[i]} -> {b}" for i, b in sorted(replacements.items()))
        print(f"repaired {damage}: {swaps}")
    for damage in report.refilled:
        print(
            f"refilled {damage.ensemble[damage.lost[0]]}: ledger {damage.ledger_id} fragment "
            f"{damage.fragment} (entries {damage.first}..{damage.last}), it lacked entries"
        )
    for damage in report.left_to_writers:
        print(
            f"left to the writer: {damage} (open ledger; run 'walog recover "
            f"{damage.ledger_id}' if its writer is gone)"
        )
    for what, why in report.unrepairable:
        print(f"not repaired: {what if not isinstance(what, int) else f'ledger {what}'}: {why}")
    print(
        f"{len(report.repaired)} fragments repaired, {len(report.unrepairable)} not, "
        f"{len(report.left_to_writers)} left to writers; unavailable bookies: "
        f"{', '.join(sorted(report.missing)) or 'none'}",
        flush=True,
    )


def _percent(text: str) -> float:
    """A percentage 0-100 for argparse."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100, got {text}")
    return value


async def _run(args: argparse.Namespace) -> int:
    passwords = [b"", *(p.encode() for p in args.password)]
    placement = placement_policy(args.placement)
    if args.once:
        client = await walog.aio.connect(
            args.metadata, **connect_options(args), placement=placement
        )
        async with client:
            report = await recover(
                client.ctx,
                passwords=passwords,
                placement=placement,
                verify=args.verify_entries,
                verify_percent=args.verify_percent,
            )
        _print(report, args.json)
        return 1 if report.unrepairable else 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    service = await connect_service(args, stop, "autorecovery", placement=placement)
    if service is None:
        return 0  # stopped before the metadata store could be reached
    async with service as client:
        metrics = (
            _serve_metrics(args.metrics_listen, args.interval) if args.metrics_listen else None
        )

        def on_report(report: Report, seconds: float) -> None:
            if metrics is not None:
                metrics.record(report, seconds, time.time())
            _print(report, args.json)

        daemon = Daemon(
            client.ctx,
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            passwords,
            interval_s=args.interval,
            lost_after_s=args.lost_after,
            on_report=on_report,
            verify_percent=args.verify_percent if args.verify_entries else None,
            placement=placement,
        )
        await daemon.run(stop)
        return 0  # stopped by SIGTERM or SIGINT


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6addr]:PORT``) as host and port; ValueError naming the problem."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"expected HOST:PORT with a port in 1..65535, got {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port_text)


def _serve_metrics(listen: str, interval_s: float) -> AutorecoveryMetrics:
    """Start serving the daemon's metrics (a daemon thread, for the life of the process)."""
    host, port = parse_listen(listen)
    registry = CollectorRegistry()
    # An audit's figures stay exported for three audit intervals (and at least a minute).
    metrics = AutorecoveryMetrics(audit_fresh_s=max(3 * interval_s, 60.0))
    registry.register(metrics)
    prometheus_client.start_http_server(port, addr=host, registry=registry)
    return metrics


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``walog autorecovery``; returns the exit status (0 done, 1 something
    was not repaired or failed, 2 bad arguments or a bad ``--config`` file).

    Settings come from the flags, then ``WALOG_METADATA``, then the ``--config`` file, then
    the defaults (walog/config_file.py); ``--print-config`` shows them and exits."""
    resolved = resolve(
        build_parser(),
        list(sys.argv[1:] if argv is None else argv),
        environment={"metadata": ENV_METADATA},
        secret=("password",),
    )
    args = resolved.args
    if not args.metadata:
        resolved.error(f"--metadata URI is required (or set {ENV_METADATA})")
    if args.interval <= 0 or args.lost_after < 0 or args.timeout <= 0:
        resolved.error("--interval and --timeout must be > 0 and --lost-after >= 0")
    if args.metrics_listen and args.once:
        resolved.error("--metrics-listen is for the daemon (leave out --once)")
    if args.metrics_listen:
        try:
            parse_listen(args.metrics_listen)
        except ValueError as exc:
            resolved.error(f"--metrics-listen: {exc}")
    if args.verify_percent and not args.verify_entries:
        resolved.error("--verify-percent needs --verify-entries")
    if resolved.print_config:
        print(resolved.render("walog autorecovery"), end="")
        return 0
    try:
        return walog._loop.run(_run(args))
    except (WalogError, ValueError, OSError) as exc:
        print(f"walog autorecovery: error: {exc}", file=sys.stderr)
        return 1


__all__ = ["EXAMPLE_HINTS", "EXAMPLE_SAMPLES", "example_config", "main"]
