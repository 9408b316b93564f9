"""Prometheus metrics of walog.

- ``client``: the client metrics a service opts into with :func:`register`;
- ``histogram``: the histograms and counters bookies and clients count into.
"""

from walog.metrics.client import ClientMetrics, register

__all__ = ["ClientMetrics", "register"]
