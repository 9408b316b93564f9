"""The ``walog`` command (also ``python -m walog``).

Every subcommand takes ``--metadata URI`` (default: the ``WALOG_METADATA`` environment
variable) and answers ``--help``. Log lines of the library go to stderr, from WARNING up
(``WALOG_LOG_LEVEL=INFO`` shows more). An unexpected exception (a bug) is one line too;
``WALOG_TRACEBACK=1`` shows its traceback. Errors print one line, ``walog: error: ...``, on stderr
and exit non-zero (1 for a failed operation, 2 for bad usage or a feature missing from this
build, 130 on Ctrl-C); never a traceback.

``bookie``, ``bench``, ``archive``, ``autorecovery`` and ``status`` hand their arguments
unchanged to the module that implements them, imported only when used.
"""

from __future__ import annotations

import argparse
import base64
import collections
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from walog._version import __version__
from walog.config_file import ENV_METADATA
from walog.errors import NoSuchLogError, WalogError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from walog.client import Client
    from walog.log.position import Position
    from walog.log.sync import Log

ENV_LOG_LEVEL = "WALOG_LOG_LEVEL"
ENV_TRACEBACK = "WALOG_TRACEBACK"

# name -> (module, function, what it is): implemented elsewhere, arguments passed unchanged.
_DELEGATED: dict[str, tuple[str, str, str]] = {
    "bookie": ("bookie.main", "main", "run a bookie (storage server); see 'walog bookie --help'"),
    "bench": ("walog.bench", "main", "run the benchmarks"),
    "archive": ("walog.spark.archive", "main", "archive closed ledgers of a log to Parquet"),
    "autorecovery": ("walog.autorecovery", "main", "re-replicate ledgers of lost bookies"),
    "status": ("walog.status", "main", "bookies, ledgers and logs; exit 1 if any need attention"),
}
# `walog bookie decommission ID`: a cluster operation run from anywhere, not a mode of the
# bookie process, delegated like the above.
_DECOMMISSION = ("walog.autorecovery.decommission", "main", "drain a bookie")
_FEATURE_NAMES = {"bench": "benchmarking", "archive": "archiving", "autorecovery": "autorecovery"}
# At most this many appends wait for their acknowledgement at once in `walog append`.
_APPEND_WINDOW = 1024


class CliError(Exception):
    """A problem to report as one line, with an exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class CommandParser(argparse.ArgumentParser):
    """The parser of every ``walog`` command, delegated ones included: a usage error is one
    line, ``walog: error: ... (see 'walog X --help')``, and exit status 2 (failures exit 1)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"walog: error: {message} (see '{self.prog} --help')\n")


# -- helpers --------------------------------------------------------------------------------


def _metadata(args: argparse.Namespace) -> str:
    uri: str | None = args.metadata
    if not uri:
        raise CliError(f"no metadata store: pass --metadata URI or set {ENV_METADATA}", 2)
    return uri


def _connect(args: argparse.Namespace) -> Client:
    from walog.client import connect

    return connect(_metadata(args), **connect_options(args))


def add_password_options(parser: argparse.ArgumentParser, what: str = "log") -> None:
    """``--password-file F`` (and ``--password P``, which other users see in the process
    list) for a password-protected log or ledger."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--password-file",
        type=Path,
        metavar="F",
        help=f"read the {what}'s password from F (its first line)",
    )
    group.add_argument(
        "--password", metavar="P", help=f"the {what}'s password (prefer --password-file) ['']"
    )


def password_of(args: argparse.Namespace) -> bytes:
    """The password the options of :func:`add_password_options` name (b"" when none, or
    for a command without them)."""
    if getattr(args, "password_file", None) is not None:
        try:
            text = args.password_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError(f"--password-file {args.password_file}: {exc.strerror}", 2) from None
        return text.splitlines()[0].encode() if text else b""
    return os.fsencode(getattr(args, "password", None) or "")


def _existing_log(client: Client, args: argparse.Namespace) -> Log:
    """The log ``args.log`` with the password of the options; never creates it
    (``open_log`` would)."""
    if args.log not in client.list_logs():
        raise NoSuchLogError(f"log {args.log!r} does not exist")
    return client.open_log(args.log, password=password_of(args))


def _records_from(args: argparse.Namespace, stdin: IO[bytes]) -> Iterator[bytes]:
    if args.records:
        for record in args.records:
            yield os.fsencode(record)
        return
    for line in stdin:
        yield line[:-1] if line.endswith(b"\n") else line


def _emit(line: str) -> None:
    print(line, flush=True)


def _data_text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


# -- subcommands ----------------------------------------------------------------------------


def _cmd_quickstart(args: argparse.Namespace) -> int:
    import logging

    from walog.quickstart import run_quickstart

    library = logging.getLogger("walog")
    level = library.level
    if ENV_LOG_LEVEL not in os.environ:
        # The tour narrates the takeover it causes; the library's warnings about the fenced
        # writer would only repeat it, out of place.
        library.setLevel(logging.ERROR)
    try:
        return run_quickstart()
    finally:
        library.setLevel(level)


def _cmd_local(args: argparse.Namespace) -> int:
    from walog.testing import LocalCluster

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.hosts is not None:
        return _run_host_cluster(args, stop)
    metadata = args.metadata or "sqlite"
    with LocalCluster(bookies=args.bookies, metadata=metadata, data_dir=args.data_dir) as cluster:
        _emit(cluster.metadata_uri)
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
        _emit(cluster.metadata_uri)
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


def _cmd_append(args: argparse.Namespace) -> int:
    stdin = sys.stdin.buffer
    with _connect(args) as client:
        log = client.open_log(
            args.log,
            ensemble_size=args.ensemble_size,
            write_quorum=args.write_quorum,
            ack_quorum=args.ack_quorum,
            password=password_of(args),
        )
        with log.open_writer() as writer:
            # Pipelined: up to _APPEND_WINDOW appends in flight, positions printed in order.
            pending: collections.deque[Future[Position]] = collections.deque()
            for record in _records_from(args, stdin):
                pending.append(writer.append_async(record))
                if len(pending) >= _APPEND_WINDOW:
                    _emit(str(pending.popleft().result()))
            writer.flush()
            while pending:
                _emit(str(pending.popleft().result()))
    return 0


def _cmd_tail(args: argparse.Namespace) -> int:
    from walog.log.position import Position

    start: Any = args.start if args.start in ("earliest", "latest") else Position.parse(args.start)
    with _connect(args) as client, _existing_log(client, args).open_reader(start) as reader:
        count = 0
        while args.max_records is None or count < args.max_records:
            record = reader.read_next(timeout=args.idle_timeout)
            if record is None:
                break
            count += 1
            if args.json:
                doc: dict[str, Any] = {"position": str(record.position)}
                doc["timestamp"] = record.timestamp
                try:
                    doc["data"] = record.data.decode("utf-8")
                except UnicodeDecodeError:
                    doc["data_base64"] = base64.b64encode(record.data).decode("ascii")
                _emit(json.dumps(doc))
            else:
                _emit(f"{record.position}\t{_data_text(record.data)}")
    return 0


def _cmd_ledgers(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        ledger_ids = client.list_ledgers()
    if args.json:
        _emit(json.dumps({"ledgers": ledger_ids}))
        return 0
    for ledger_id in ledger_ids:
        _emit(str(ledger_id))
    return 0


def _cmd_bookies(args: argparse.Namespace) -> int:
    from walog.ledger.ensemble import read_only_racks

    with _connect(args) as client:
        racks = client.bookie_racks()
        modes = dict.fromkeys(client.bookies(), "available")
        modes.update(dict.fromkeys(client.read_only_bookies(), "read-only"))
        racks.update(client.loop_thread.run(read_only_racks(client.async_client.ctx.store)))
    rows = [(b, mode, racks.get(b, "?")) for b, mode in sorted(modes.items())]
    if args.json:
        bookies = [{"bookie_id": b, "state": m, "rack": r} for b, m, r in rows]
        _emit(json.dumps({"bookies": bookies}))
        return 0
    for bookie_id, mode, rack in rows:
        _emit(f"{bookie_id} {mode} {rack}")
    return 0


def _cmd_ledger_show(args: argparse.Namespace) -> int:
    from walog.tables import render_table

    with _connect(args) as client:
        md = client.ledger_metadata(args.ledger_id)
    durability = md.durability
    doc = {
        "ledger_id": md.ledger_id,
        "state": md.state,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "last_entry_id": md.last_entry_id,
        "durability": getattr(durability, "name", str(durability)),
        "ensembles": [[first, list(bookies)] for first, bookies in md.ensembles],
        "custom_metadata": md.custom_metadata,
    }
    if args.json:
        _emit(json.dumps(doc, indent=2))
        return 0
    _emit(
        f"ledger {md.ledger_id}: {md.state}, last entry {md.last_entry_id}, "
        f"E={md.ensemble_size} Qw={md.write_quorum} Qa={md.ack_quorum}, {doc['durability']}"
    )
    rows = [[str(first), ", ".join(bookies)] for first, bookies in md.ensembles]
    for line in render_table(["FIRST ENTRY", "ENSEMBLE"], rows):
        _emit(line)
    for key, value in sorted((md.custom_metadata or {}).items()):
        _emit(f"{key}: {value}")
    return 0


def _cmd_logs(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        names = client.list_logs()
    if args.json:
        _emit(json.dumps({"logs": names}))
        return 0
    for name in names:
        _emit(name)
    return 0


def _cmd_log_show(args: argparse.Namespace) -> int:
    from walog.tables import render_table

    with _connect(args) as client:
        log = _existing_log(client, args)
        segments = log.segments()
        snapshots = log.metadata().snapshots
    doc: dict[str, object] = {
        "name": args.log,
        "segments": [
            {
                "ledger_id": s.ledger_id,
                "state": s.state,
                "first_position": None if s.first_position is None else str(s.first_position),
                "last_entry_id": s.last_entry_id,
            }
            for s in segments
        ],
        # State-machine snapshots (walog.recipes), oldest first.
        "snapshots": [info.to_doc() for info in snapshots],
    }
    if args.json:
        _emit(json.dumps(doc, indent=2))
        return 0
    rows = [
        [
            str(s.ledger_id),
            s.state,
            "-" if s.first_position is None else str(s.first_position),
            str(s.last_entry_id),
        ]
        for s in segments
    ]
    for line in render_table(["LEDGER", "STATE", "FIRST POSITION", "LAST ENTRY"], rows):
        _emit(line)
    if snapshots:
        _emit("")
        snaps = [
            [str(i.position), i.location, str(i.size_bytes), i.checksum, i.node] for i in snapshots
        ]
        for line in render_table(["SNAPSHOT AT", "STORED IN", "BYTES", "CHECKSUM", "NODE"], snaps):
            _emit(line)
    return 0


def _cmd_truncate(args: argparse.Namespace) -> int:
    from walog.log.position import Position

    before = Position.parse(args.before)
    with _connect(args) as client:
        deleted = _existing_log(client, args).truncate(before)
    _emit(f"deleted {deleted} ledger(s) of log {args.log!r} before {before}")
    return 0


def _cmd_recover(args: argparse.Namespace) -> int:
    password = password_of(args)
    with _connect(args) as client:
        with client.open_ledger(args.ledger_id, recovery=True, password=password) as reader:
            last = reader.last_add_confirmed
        _emit(f"ledger {args.ledger_id}: CLOSED, last entry {last}")
    return 0


def _run_delegated(name: str, argv: list[str], target: tuple[str, str, str] | None = None) -> int:
    module_name, function, _ = target or _DELEGATED[name]
    feature = _FEATURE_NAMES.get(name, name)
    try:
        entry: Callable[[list[str]], int | None] | None = getattr(
            importlib.import_module(module_name), function, None
        )
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise CliError(f"{feature} is not available: {exc}", 2) from exc
        entry = None
    if entry is None:
        if {"-h", "--help"} & set(argv):
            _build_parser().parse_args([name, "--help"])
        raise CliError(f"{feature} is not available in this build", 2)
    return entry(argv) or 0


# -- parser ---------------------------------------------------------------------------------


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--metadata URI`` (default from ``WALOG_METADATA``) and ``--timeout S``: how every
    subcommand, delegated ones included, finds and reaches the cluster."""
    parser.add_argument(
        "--metadata",
        metavar="URI",
        default=os.environ.get(ENV_METADATA),
        help=f"zk://HOST:PORT[,...]/CHROOT or sqlite:///ABS/PATH.db [env {ENV_METADATA}]",
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to connect and per call [10]"
    )
    security = parser.add_argument_group("bookie connections")
    security.add_argument("--tls-ca", type=Path, metavar="F", help="CA bundle: TLS to bookies")
    security.add_argument(
        "--tls-cert", type=Path, metavar="F", help="client certificate (mutual TLS)"
    )
    security.add_argument("--tls-key", type=Path, metavar="F", help="key of --tls-cert")
    security.add_argument(
        "--auth-token-file", type=Path, metavar="F", help="bearer token bookies ask for"
    )


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """``timeout``, ``tls`` and ``auth_token`` for ``walog.connect`` from the options of
    :func:`add_connection_options`.

    Raises:
        CliError: a TLS or token file is missing or unreadable (status 2).
    """
    from walog.transport.credentials import credentials_from_files

    try:
        tls, token = credentials_from_files(
            args.tls_ca, args.tls_cert, args.tls_key, args.auth_token_file
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    return {"timeout": args.timeout, "tls": tls, "auth_token": token}


def _build_parser() -> CommandParser:
    common = CommandParser(add_help=False)
    add_connection_options(common)
    parser = CommandParser(
        prog="walog",
        description="walog: a replicated write-ahead log built on BookKeeper-style ledgers.",
    )
    parser.add_argument("--version", action="version", version=f"walog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True

    def command(name: str, func: Callable[[argparse.Namespace], int], text: str) -> CommandParser:
        p: CommandParser = sub.add_parser(name, parents=[common], help=text, description=text)
        p.set_defaults(func=func)
        return p

    quickstart = command("quickstart", _cmd_quickstart, "a guided tour on a local cluster")
    quickstart.epilog = "It starts (and removes) a cluster of its own; --metadata is not used."
    local = command("local", _cmd_local, "run a local cluster until Ctrl-C; prints its URI")
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
    local.epilog = (
        "With --metadata, the bookies register in that store instead of SQLite. With "
        "--hosts, everything runs in network namespaces reachable only from its hosts."
    )

    append = command("append", _cmd_append, "append records to a log (takes over its writer)")
    append.add_argument("log", help="log name (created if missing)")
    append.add_argument("records", nargs="*", help="records; none: one per line of stdin")
    append.add_argument("--ensemble-size", type=int, default=3, help="for a new log [3]")
    append.add_argument("--write-quorum", type=int, default=3, help="for a new log [3]")
    append.add_argument("--ack-quorum", type=int, default=2, help="for a new log [2]")
    add_password_options(append)
    append.epilog = "Opening the writer fences the log's current writer. Prints positions."

    tail = command("tail", _cmd_tail, "print a log's records, following new ones")
    tail.add_argument("log", help="log name")
    tail.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="START",
        help="earliest, latest or LEDGER:ENTRY:SLOT [earliest]",
    )
    tail.add_argument("-n", "--max", dest="max_records", type=int, help="stop after N records")
    tail.add_argument(
        "--idle-timeout", type=float, metavar="S", help="stop after S seconds without a record"
    )
    tail.add_argument("--json", action="store_true", help="one JSON object per record")
    add_password_options(tail)

    json_help = "print one JSON object instead of text"
    ledgers = command("ledgers", _cmd_ledgers, "list ledger ids")
    ledgers.add_argument("--json", action="store_true", help=json_help)
    bookies = command(
        "bookies", _cmd_bookies, "list registered bookies: available or read-only, and racks"
    )
    bookies.add_argument("--json", action="store_true", help=json_help)
    ledger = sub.add_parser("ledger", help="inspect a ledger", description="inspect a ledger")
    ledger_sub = ledger.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    ledger_sub.required = True
    show = ledger_sub.add_parser("show", parents=[common], help="print a ledger's metadata")
    show.add_argument("ledger_id", type=int, metavar="ID", help="the ledger's id")
    show.add_argument("--json", action="store_true", help=json_help)
    show.set_defaults(func=_cmd_ledger_show)

    logs = command("logs", _cmd_logs, "list log names")
    logs.add_argument("--json", action="store_true", help=json_help)
    log = sub.add_parser("log", help="inspect a log", description="inspect a log")
    log_sub = log.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    log_sub.required = True
    log_show = log_sub.add_parser("show", parents=[common], help="print a log's segments")
    log_show.add_argument("log", help="log name")
    log_show.add_argument("--json", action="store_true", help=json_help)
    log_show.set_defaults(func=_cmd_log_show)

    truncate = command("truncate", _cmd_truncate, "delete a log's ledgers before a position")
    truncate.add_argument("log", help="log name")
    truncate.add_argument("--before", required=True, metavar="POSITION", help="LEDGER:ENTRY:SLOT")
    add_password_options(truncate)

    recover = command("recover", _cmd_recover, "fence, recover and close an open ledger")
    recover.add_argument("ledger_id", type=int, metavar="ID", help="the ledger's id")
    add_password_options(recover, "ledger")

    for name, (_, _, text) in _DELEGATED.items():
        p = sub.add_parser(name, parents=[common], help=text, description=text)
        p.epilog = "Arguments are handed unchanged to the implementation."
    return parser


def _configure_logging() -> None:
    """Library log lines go to stderr, WARNING and up (``WALOG_LOG_LEVEL`` to change), so
    stdout carries only the command's output. An application's own set-up is kept."""
    import logging

    import structlog

    if structlog.is_configured():
        return
    chosen = os.environ.get(ENV_LOG_LEVEL)
    level = logging.getLevelName((chosen or "WARNING").upper())
    if not isinstance(level, int):
        raise CliError(f"{ENV_LOG_LEVEL} must be DEBUG, INFO, WARNING or ERROR", 2)
    # kazoo logs every reconnect attempt; its failures reach the user as one MetadataError
    # line, so its own lines show only when a level was asked for.
    logging.getLogger("kazoo").setLevel(level if chosen else logging.CRITICAL)
    # The library logs through the standard logging module (walog._loggers).
    logging.basicConfig(level=level, stream=sys.stderr, format="%(name)s: %(message)s")
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``walog`` command with ``argv`` (default ``sys.argv[1:]``); return the status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:2] == ["bookie", "decommission"]:
            return _run_delegated("decommission", args_list[2:], _DECOMMISSION)
        if args_list and args_list[0] in _DELEGATED:
            return _run_delegated(args_list[0], args_list[1:])
        _configure_logging()
        args = _build_parser().parse_args(args_list)
        status: int = args.func(args)
        return status
    except CliError as exc:
        return _fail(str(exc), exc.status)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        # The reader of our output went away (`walog tail log | head`): it has what it
        # wanted, so stop quietly and successfully.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except WalogError as exc:
        return _fail(f"{type(exc).__name__}: {_one_line(exc)}", 1)
    except (ValueError, OSError) as exc:
        return _fail(_one_line(exc), 1)
    except Exception as exc:
        # A bug rather than an operational error: still one line, the traceback on request.
        if os.environ.get(ENV_TRACEBACK) == "1":
            raise
        return _fail(
            f"unexpected {type(exc).__name__}: {_one_line(exc)} "
            f"(set {ENV_TRACEBACK}=1 to see the traceback)",
            1,
        )


def _one_line(exc: BaseException) -> str:
    lines: Iterable[str] = str(exc).strip().splitlines() or [type(exc).__name__]
    return next(iter(lines))


def _fail(message: str, status: int) -> int:
    print(f"walog: error: {message}", file=sys.stderr, flush=True)
    return status


__all__ = [
    "ENV_LOG_LEVEL",
    "ENV_METADATA",
    "ENV_TRACEBACK",
    "CliError",
    "CommandParser",
    "add_connection_options",
    "add_password_options",
    "connect_options",
    "main",
    "password_of",
]
