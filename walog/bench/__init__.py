"""Benchmarks of walog on a local cluster, side by side with peers and physical floors.

``walog bench`` runs :func:`main`; see :mod:`walog.bench.command` for the options. Needs the
``bench`` extra (hdrhistogram, matplotlib); ``--peers`` needs the ``peers`` extra and
Debian's ``etcd-server``.

- ``command``: the command; ``scenarios``: the scenarios against a running cluster, with
  ``checkpoint_tail`` (tail lag during checkpoints), ``hosts`` (between hosts),
  ``metrics_cost`` (what client metrics cost), ``memory_probe`` (a writer's memory),
  ``restart`` (a bookie killed and started again) and ``barrier`` (read barrier latency);
- ``floors`` and ``echo_server``: what the disk and a bare stream can do; ``peers`` and
  ``etcd_load``: etcd and NATS measured the same way;
- ``soak``: a long run through a log with retention, and ``soak_watch``: the bookies'
  disks, modes and failures it watches besides their memory; ``profile``: py-spy samples;
- ``stats``: histograms, rates and CPU readings; ``report`` and ``sections``: the table,
  the plots and the Markdown report;
- ``curves`` and ``curve_runs``: the cost curves (``--curves``), their data, sections and
  plots, measured by ``curve_logs`` (many logs at once, idle tailing readers),
  ``curve_storage`` (bookie memory and index, GC and compaction), ``curve_catchup`` (a
  closed log read back) and ``curve_metadata`` (metadata calls per roll, takeover and
  retention pass).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``walog bench`` with ``argv`` (default: the process arguments); return the status.

    The harness is imported here, not with the package, so that helper modules run with
    ``python -m walog.bench.<module>`` (the echo server, the etcd load generator) load
    only what they use.
    """
    try:
        from walog.bench.command import main as run
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.startswith("walog"):
            raise
        print(
            f"walog: error: benchmarking needs {exc.name!r}: pip install 'walog[bench]'",
            file=sys.stderr,
        )
        return 2
    return run(argv)


__all__ = ["main"]
