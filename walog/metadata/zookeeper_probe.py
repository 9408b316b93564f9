"""Questions to a ZooKeeper ensemble's servers asked outside kazoo's session.

Whether anything listens, asked before kazoo connects: kazoo retries a refused connection
until its timeout runs out, so a stopped ZooKeeper or a mistyped port would cost a caller
the whole connection timeout and end with a message about a timeout. One TCP connection
per server, each refused at once when nothing listens, tells the difference first.

Which version each server runs (the ``srvr`` command, allowed by ZooKeeper's default
four-letter-word list), and whether that version is known to lose transactions it
acknowledged (:func:`known_loss`): walog's guarantees rest on a store that keeps every
change it acknowledged.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Sequence

from walog.metadata.uri import ZooKeeperURI, parse_uri

PROBE_TIMEOUT_S = 1.0
"""How long one server may take to accept the probe before the probe leaves it to kazoo."""


def every_server_refuses(hosts: Sequence[str]) -> bool:
    """True when every ``HOST:PORT`` of ``hosts`` refuses a TCP connection (nothing listens
    there). A server that accepts, does not answer in :data:`PROBE_TIMEOUT_S`, or whose
    name does not resolve makes it False: kazoo reports those itself."""
    for host in hosts:
        try:
            socket.create_connection(_address(host), timeout=PROBE_TIMEOUT_S).close()
        except ConnectionRefusedError:
            continue
        except (OSError, ValueError):
            return False
        return False
    return bool(hosts)


def _address(host: str) -> tuple[str, int]:
    name, _, port = host.rpartition(":")
    return name.strip("[]"), int(port)


def server_version(host: str) -> str | None:
    """The version ``HOST:PORT`` says it runs (``srvr``), e.g. ``"3.8.0"``; None when it
    does not answer within :data:`PROBE_TIMEOUT_S` or refuses the command."""
    try:
        with socket.create_connection(_address(host), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(b"srvr")
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except (OSError, ValueError):
        return None
    found = re.search(rb"Zookeeper version: (\d+\.\d+\.\d+)", b"".join(chunks))
    return found.group(1).decode() if found else None


_UPGRADE = "run 3.8.4 or a later 3.8 release, or 3.9.4 or later"
_LOSSES: tuple[tuple[Callable[[tuple[int, ...]], bool], str], ...] = (
    (
        lambda r: r < (3, 8, 4) or (3, 9, 0) <= r < (3, 9, 2),
        "a majority of its ensemble crashes around a resync (ZOOKEEPER-4646, ZOOKEEPER-4785)",
    ),
    (
        lambda r: r == (3, 9, 3),
        "a server that was behind leads after syncing (ZOOKEEPER-4925)",
    ),
)
"""ZooKeeper releases known to lose transactions they acknowledged, and when."""


def known_loss(version: str) -> str | None:
    """Why ZooKeeper ``version`` (``MAJOR.MINOR.PATCH``) can lose writes it acknowledged,
    or None when walog knows of no such bug in it."""
    try:
        release = tuple(int(part) for part in version.split(".")[:3])
    except ValueError:
        return None
    if len(release) != 3:
        return None
    for affected, when in _LOSSES:
        if affected(release):
            return (
                f"ZooKeeper {version} can lose transactions it acknowledged when {when}, and "
                f"a log then forgets ledgers it listed: {_UPGRADE}"
            )
    return None


def servers_known_to_lose_writes(metadata_uri: str) -> list[str]:
    """``"HOST:PORT: why"`` for each ZooKeeper server of ``metadata_uri`` whose release is
    known to lose acknowledged writes (:func:`known_loss`); none for a SQLite URI or for a
    server that does not say its version."""
    try:
        config = parse_uri(metadata_uri)
    except ValueError:
        return []
    if not isinstance(config, ZooKeeperURI):
        return []
    found = []
    for host in config.hosts:
        version = server_version(host)
        why = known_loss(version) if version is not None else None
        if why is not None:
            found.append(f"{host}: {why}")
    return found


__all__ = [
    "PROBE_TIMEOUT_S",
    "every_server_refuses",
    "known_loss",
    "server_version",
    "servers_known_to_lose_writes",
]
