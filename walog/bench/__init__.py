"""Benchmarks of walog on a local cluster, side by side with peers and physical floors.

``walog bench`` runs :func:`main`; see :mod:`walog.bench.command` for the options. Needs the
``bench`` extra (hdrhistogram, matplotlib); ``--peers`` needs the ``peers`` extra and
Debian's ``etcd-server``.
"""

from walog.bench.command import main

__all__ = ["main"]
