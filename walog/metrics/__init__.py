"""Prometheus metrics of walog.

- ``client``: the client metrics a service opts into with :func:`register`;
- ``histogram``: the histograms and counters bookies and clients count into.

``ClientMetrics`` and ``register`` are imported on first use: code that only counts into
``histogram`` (a bookie without a metrics port, a client that never registers) does not
load the Prometheus client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walog.metrics.client import ClientMetrics, register

__all__ = ["ClientMetrics", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from walog.metrics import client

        return getattr(client, name)
    raise AttributeError(f"module 'walog.metrics' has no attribute {name!r}")
