"""The commands about a cluster as a whole: ``walog local`` runs one on this host (or across
simulated hosts) until Ctrl-C, ``walog bookies`` lists the bookies of one."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence

from walog.cli.options import AddCommand, CliError, connect, emit

_JSON_HELP = "print one JSON object instead of text"


def run_local(args: argparse.Namespace) -> int:
    """``walog local``: start a cluster, print its metadata URI, stop it on a signal."""
    from walog.testing import LocalCluster

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.hosts is not None:
        return _run_host_cluster(args, stop)
    metadata = args.metadata or "sqlite"
    with LocalCluster(bookies=args.bookies, metadata=metadata, data_dir=args.data_dir) as cluster:
        _started(args, cluster.metadata_uri, cluster.bookie_ids)
        print(
            f"walog: {len(cluster.bookie_ids)} bookies running "
            f"({', '.join(cluster.bookie_ids)}); logs under {cluster.data_dir}; "
            "Ctrl-C or SIGTERM stops them",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
        print("walog: stopping the local cluster", file=sys.stderr, flush=True)
    return 0


def _run_host_cluster(args: argparse.Namespace, stop: threading.Event) -> int:
    from walog.testing.hosts import HostCluster

    if args.metadata:
        raise CliError("--hosts starts a ZooKeeper ensemble of its own: leave out --metadata", 2)
    cluster = HostCluster(bookies=args.hosts, racks=args.racks, data_dir=args.data_dir)
    with cluster:
        _started(args, cluster.metadata_uri, cluster.bookie_ids)
        hosts = ", ".join(f"{b} ({r})" for b, r in cluster.racks.items())
        client = cluster.host(cluster.client_hosts[0]).namespace
        print(
            f"walog: {len(cluster.bookie_ids)} bookies on their own hosts: {hosts}; a "
            f"ZooKeeper ensemble on zk1-zk3; run clients on a client host, e.g. "
            f"'ip netns exec {client} walog bookies --metadata URI'; logs under "
            f"{cluster.data_dir}; Ctrl-C or SIGTERM stops everything",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
        print("walog: stopping the hosts", file=sys.stderr, flush=True)
    return 0


def _started(args: argparse.Namespace, uri: str, bookie_ids: Sequence[str]) -> None:
    """The first line of ``walog local``: the cluster's metadata URI (or, with ``--json``,
    one JSON object with it and the bookies)."""
    if args.json:
        emit(json.dumps({"metadata_uri": uri, "bookies": list(bookie_ids)}))
    else:
        emit(uri)


def list_bookies(args: argparse.Namespace) -> int:
    """``walog bookies``: each registered bookie, writable or read-only (the words of
    ``walog status``), with its rack."""
    from walog.ledger.ensemble import read_only_racks

    with connect(args) as client:
        racks = client.bookie_racks()
        modes = dict.fromkeys(client.bookies(), "writable")
        modes.update(dict.fromkeys(client.read_only_bookies(), "read-only"))
        racks.update(client.loop_thread.run(read_only_racks(client.async_client.ctx.store)))
    rows = [(b, mode, racks.get(b, "?")) for b, mode in sorted(modes.items())]
    if args.json:
        bookies = [{"bookie_id": b, "state": m, "rack": r} for b, m, r in rows]
        emit(json.dumps({"bookies": bookies}))
        return 0
    for bookie_id, mode, rack in rows:
        emit(f"{bookie_id} {mode} {rack}")
    return 0


def add_commands(command: AddCommand) -> None:
    """Add ``walog local`` and ``walog bookies``."""
    local = command("local", run_local, "run a local cluster until Ctrl-C; prints its URI")
    local.add_argument("--bookies", type=int, default=3, help="number of bookies [3]")
    local.add_argument("--data-dir", help="keep bookie data here [a temporary directory]")
    local.add_argument(
        "--hosts",
        type=int,
        metavar="N",
        help="N bookies, each on a host of its own (network namespaces, needs root), with a "
        "3-node ZooKeeper ensemble and client hosts",
    )
    local.add_argument("--racks", type=int, default=3, help="with --hosts: racks [3]")
    local.add_argument(
        "--json", action="store_true", help='first line: {"metadata_uri", "bookies"} instead'
    )
    local.epilog = (
        "With --metadata, the bookies register in that store instead of SQLite. With "
        "--hosts, everything runs in network namespaces reachable only from its hosts."
    )
    bookies = command(
        "bookies", list_bookies, "list registered bookies: writable or read-only, and racks"
    )
    bookies.add_argument("--json", action="store_true", help=_JSON_HELP)


__all__ = ["add_commands", "list_bookies", "run_local"]
