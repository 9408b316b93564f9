"""What every ``walog`` command shares: its parser class, its errors, and the options that find
and reach a cluster or name a password.

The commands implemented in other packages (``walog autorecovery``, ``bookie decommission``,
``archive``, ``bench``) build their parsers from here too: they sit above this package, and
the program that dispatches to them (:mod:`walog.main`) above them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from walog.config_file import ENV_METADATA

if TYPE_CHECKING:
    from walog.aio import AsyncClient
    from walog.client import Client
    from walog.log.sync import Log

SERVICE_CONNECT_RETRY_S = 5.0
"""Seconds a service command waits before it tries an unreachable metadata store again."""
ENV_LOG_LEVEL = "WALOG_LOG_LEVEL"
ENV_TRACEBACK = "WALOG_TRACEBACK"

Command = Callable[[argparse.Namespace], int]
"""What runs a subcommand: its parsed arguments in, its exit status out."""
AddCommand = Callable[[str, Command, str], argparse.ArgumentParser]
"""``add(name, run, text)``: a new subcommand's parser, holding the connection options."""


class CliError(Exception):
    """A problem to report as one line, with an exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class CommandParser(argparse.ArgumentParser):
    """The parser of every ``walog`` command, delegated ones included: a usage error is one
    line, ``walog: error: ... (see 'walog X --help')``, and exit status 2 (failures exit 1)."""

    intermixed = False
    """Options may stand between positionals, as in ``walog append LOG --take-over RECORD``
    (:meth:`argparse.ArgumentParser.parse_intermixed_args`)."""
    subcommand = False
    """A subcommand of ``walog``: an unknown argument is reported with this command's usage
    rather than that of ``walog``."""
    _intermixing = False

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"walog: error: {message} (see '{self.prog} --help')\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        """As argparse's, intermixed when :attr:`intermixed`; a subcommand's unknown
        arguments are its own usage error."""
        if self.intermixed and not self._intermixing:
            # parse_known_intermixed_args calls this method again: those calls parse plainly.
            self._intermixing = True
            try:
                parsed = self.parse_known_intermixed_args(args, namespace)
            finally:
                self._intermixing = False
        else:
            parsed = super().parse_known_args(args, namespace)
        if self.subcommand and parsed[1] and not self._intermixing:
            self.error(f"unrecognized arguments: {' '.join(parsed[1])}")
        return parsed


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
    """``timeout``, ``tls``, ``auth_token`` and ``config`` for ``walog.connect`` from the
    options of :func:`add_connection_options` (``--timeout`` bounds the connection and, as
    ``Timeouts.metadata``, each metadata call).

    Raises:
        CliError: a TLS or token file is missing or unreadable (status 2).
    """
    from walog.config import ClientConfig, Timeouts
    from walog.transport.credentials import credentials_from_files

    try:
        tls, token = credentials_from_files(
            args.tls_ca, args.tls_cert, args.tls_key, args.auth_token_file
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    config = ClientConfig(timeouts=Timeouts(metadata=args.timeout))
    return {"timeout": args.timeout, "tls": tls, "auth_token": token, "config": config}


async def connect_service(
    args: argparse.Namespace, stop: asyncio.Event, command: str, **extra: Any
) -> AsyncClient | None:
    """Connect a service (``walog maintain``, ``walog autorecovery``) with the options of
    :func:`add_connection_options` plus ``extra``. While the metadata store cannot be
    reached, say so on stderr and try again every :data:`SERVICE_CONNECT_RETRY_S` seconds,
    until it can or ``stop`` is set (then None): a service started during an outage, or
    before its ZooKeeper ensemble, waits for it instead of exiting.

    Raises:
        walog.errors.WalogError: an error no retry can fix (refused credentials), at once.
        ValueError: a malformed URI or setting, at once.
        CliError: as :func:`connect_options`.
    """
    import walog.aio
    from walog.errors import WalogError, is_retriable

    options = connect_options(args)
    while not stop.is_set():
        try:
            return await walog.aio.connect(args.metadata, **options, **extra)
        except WalogError as exc:
            if not is_retriable(exc):
                raise
            print(
                f"walog {command}: {exc}; trying again in {SERVICE_CONNECT_RETRY_S:g} s",
                file=sys.stderr,
                flush=True,
            )
        try:
            await asyncio.wait_for(stop.wait(), SERVICE_CONNECT_RETRY_S)
        except TimeoutError:
            continue
    return None


def metadata_of(args: argparse.Namespace) -> str:
    """The ``--metadata`` URI of :func:`add_connection_options`.

    Raises:
        CliError: neither ``--metadata`` nor ``WALOG_METADATA`` names one (status 2).
    """
    uri: str | None = args.metadata
    if not uri:
        raise CliError(f"no metadata store: pass --metadata URI or set {ENV_METADATA}", 2)
    return uri


def connect(args: argparse.Namespace) -> Client:
    """A client of the cluster the options of :func:`add_connection_options` name."""
    from walog.client import connect as connect_to

    uri = metadata_of(args)
    check_zookeeper_listens(uri)
    # The commands work on an existing cluster: a missing store is a mistyped URI.
    return connect_to(uri, **connect_options(args), create_metadata=False)


def check_zookeeper_listens(uri: str) -> None:
    """Fail at once when every ZooKeeper server of ``uri`` refuses connections (nothing
    listens on its port), instead of after the connection timeout. Anything else (no
    answer, a name that does not resolve, a sqlite URI) is left to the store to report.

    Raises:
        CliError: every server refused (status 1).
    """
    from walog.metadata.uri import ZooKeeperURI, parse_uri
    from walog.metadata.zookeeper_probe import every_server_refuses

    try:
        config = parse_uri(uri)
    except ValueError:
        return  # reported by connect, with the accepted forms
    if isinstance(config, ZooKeeperURI) and every_server_refuses(config.hosts):
        raise CliError(
            f"MetadataError: ZooKeeper {config.connect_string} refuses connections: nothing "
            "listens there (is ZooKeeper running? check the metadata URI)"
        )


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


def existing_log(client: Client, args: argparse.Namespace) -> Log:
    """The log ``args.log`` with the password of the options; never creates it
    (``open_log`` would).

    Raises:
        NoSuchLogError: there is no such log.
    """
    from walog.errors import NoSuchLogError

    if args.log not in client.list_logs():
        raise NoSuchLogError(f"log {args.log!r} does not exist")
    return client.open_log(args.log, password=password_of(args))


def emit(line: str) -> None:
    """One line of a command's output on stdout, flushed (a pipe sees it at once)."""
    print(line, flush=True)


__all__ = [
    "ENV_LOG_LEVEL",
    "ENV_METADATA",
    "ENV_TRACEBACK",
    "SERVICE_CONNECT_RETRY_S",
    "AddCommand",
    "CliError",
    "Command",
    "CommandParser",
    "add_connection_options",
    "add_password_options",
    "connect",
    "connect_options",
    "connect_service",
    "emit",
    "existing_log",
    "metadata_of",
    "password_of",
]
