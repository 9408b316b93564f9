"""TCP keepalive on the native port's connections, set alike by clients and bookies."""

from __future__ import annotations

import contextlib
import socket

KEEPALIVE_IDLE_S = 10
"""An idle connection is probed after this many seconds..."""
KEEPALIVE_PROBES = 3
"""... every ``KEEPALIVE_IDLE_S / 2`` seconds, and closed after this many unanswered."""


def keepalive(sock: socket.socket) -> None:
    """TCP keepalive on ``sock``, so that a peer gone without a word (a host that died, a
    cable pulled) is noticed on an idle connection too (best effort: Linux options)."""
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_IDLE_S // 2)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)


__all__ = ["KEEPALIVE_IDLE_S", "KEEPALIVE_PROBES", "keepalive"]
