"""Prometheus metrics of walog.

:func:`register` makes the client metrics a service opts into (see
:mod:`walog.metrics.client`); :mod:`walog.metrics.histogram` holds the histograms bookies and
clients count into.
"""

from walog.metrics.client import ClientMetrics, register

__all__ = ["ClientMetrics", "register"]
