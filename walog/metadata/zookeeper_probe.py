"""Whether anything listens on a ZooKeeper ensemble's ports, asked before kazoo connects.

kazoo retries a refused connection until its timeout runs out, so a stopped ZooKeeper or
a mistyped port would cost a caller the whole connection timeout and end with a message
about a timeout. One TCP connection per server, each refused at once when nothing
listens, tells the difference first.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

PROBE_TIMEOUT_S = 1.0
"""How long one server may take to accept the probe before the probe leaves it to kazoo."""


def every_server_refuses(hosts: Sequence[str]) -> bool:
    """True when every ``HOST:PORT`` of ``hosts`` refuses a TCP connection (nothing listens
    there). A server that accepts, does not answer in :data:`PROBE_TIMEOUT_S`, or whose
    name does not resolve makes it False: kazoo reports those itself."""
    for host in hosts:
        name, _, port = host.rpartition(":")
        try:
            socket.create_connection((name.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
        except ConnectionRefusedError:
            continue
        except (OSError, ValueError):
            return False
        return False
    return bool(hosts)


__all__ = ["PROBE_TIMEOUT_S", "every_server_refuses"]
