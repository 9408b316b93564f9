"""The ``walog`` program (``walog``, ``python -m walog``): runs a command of :mod:`walog.cli`,
or hands the arguments, unchanged, to the package that implements the command.

Every subcommand takes ``--metadata URI`` (default: the ``WALOG_METADATA`` environment
variable) and answers ``--help``. Log lines of the library go to stderr, from WARNING up
(``WALOG_LOG_LEVEL=INFO`` shows more). An unexpected exception (a bug) is one line too;
``WALOG_TRACEBACK=1`` shows its traceback. Errors print one line, ``walog: error: ...``, on
stderr and exit non-zero (1 for a failed operation, 2 for bad usage or a feature missing from
this build, 130 on Ctrl-C); never a traceback.

``walog autorecovery``, ``bookie decommission``, ``maintain``, ``archive`` and ``bench`` live
in their own packages and build their parsers from :mod:`walog.cli.options`, below them;
this module is the one above them all and imports each only when its command runs.
``walog bookie`` runs the bookie's own program, imported by name: the client library never
imports the bookie.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from walog.cli import parser
from walog.cli.options import ENV_LOG_LEVEL, ENV_TRACEBACK, CliError, CommandParser
from walog.errors import WalogError

Main = Callable[[list[str]], "int | None"]
"""A delegated command's entry point: its arguments in, its exit status out."""


def _bookie() -> Main:
    # The one import of walog that names the bookie: `walog bookie` runs the bookie's own
    # program (the bookie imports the client's wire layer, never the other way round).
    main: Main = importlib.import_module("bookie.main").main
    return main


def _decommission() -> Main:
    from walog.autorecovery.decommission import main

    return main


def _bench() -> Main:
    from walog.bench import main

    return main


def _archive() -> Main:
    from walog.spark.archive_command import main

    return main


def _autorecovery() -> Main:
    from walog.autorecovery.command import main

    return main


def _maintain() -> Main:
    from walog.maintenance.command import main

    return main


def _status() -> Main:
    from walog.cli.status import main

    return main


class Delegated(NamedTuple):
    """A command implemented by a module that parses its own arguments."""

    module: str
    """Where it is implemented (a missing one is a feature missing from this build)."""
    load: Callable[[], Main]
    """Imports that module and gives the command's entry point."""
    text: str
    """Its one-line help."""
    feature: str
    """What a message that it is not available calls it."""


DELEGATED: dict[str, Delegated] = {
    "bookie": Delegated(
        "bookie.main",
        _bookie,
        "run a bookie (storage server), or 'walog bookie decommission ID' to drain one",
        "bookie",
    ),
    "bench": Delegated("walog.bench", _bench, "run the benchmarks", "benchmarking"),
    "archive": Delegated(
        "walog.spark.archive_command",
        _archive,
        "archive closed ledgers of a log to Parquet",
        "archiving",
    ),
    "autorecovery": Delegated(
        "walog.autorecovery.command",
        _autorecovery,
        "re-replicate ledgers of lost bookies",
        "autorecovery",
    ),
    "maintain": Delegated(
        "walog.maintenance.command",
        _maintain,
        "apply every log's stored retention and archive policy, once or as a service",
        "maintenance",
    ),
    "status": Delegated(
        "walog.cli.status",
        _status,
        "bookies, ledgers and logs; exit 1 if any need attention",
        "status",
    ),
}
DECOMMISSION = Delegated(
    "walog.autorecovery.decommission", _decommission, "drain a bookie", "decommission"
)
"""``walog bookie decommission ID``: a cluster operation run from anywhere, not a mode of the
bookie process, handed over like the commands of :data:`DELEGATED`."""


def build_parser() -> CommandParser:
    """The parser of ``walog`` (:func:`walog.cli.parser.build_parser`)."""
    return parser.build_parser({name: d.text for name, d in DELEGATED.items()})


def _run_delegated(name: str, argv: list[str], delegated: Delegated) -> int:
    try:
        entry: Main | None = delegated.load()
    except ModuleNotFoundError as exc:
        if exc.name is None or not (delegated.module + ".").startswith(exc.name + "."):
            raise CliError(f"{delegated.feature} is not available: {exc}", 2) from exc
        entry = None
    if entry is None:
        if {"-h", "--help"} & set(argv):
            build_parser().parse_args([name, "--help"])
        raise CliError(f"{delegated.feature} is not available in this build", 2)
    return entry(argv) or 0


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
            return _run_delegated("decommission", args_list[2:], DECOMMISSION)
        if args_list and args_list[0] in DELEGATED:
            return _run_delegated(args_list[0], args_list[1:], DELEGATED[args_list[0]])
        _configure_logging()
        args = build_parser().parse_args(args_list)
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


__all__ = ["DECOMMISSION", "DELEGATED", "Delegated", "Main", "build_parser", "main"]
