"""What metrics cost the append path: pipelined appends with client metrics off and on.

The rounds alternate off, on, on, off, ... (each pair in both orders) so a slow drift of
the machine's load weighs on both sides alike. While metrics are on, the client's registry
is served over HTTP from this process and another process scrapes it and every bookie's
``/metrics`` once a second, as Prometheus would.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry

import walog._loop
import walog.aio
import walog.metrics
from walog.bench import scenarios
from walog.bench.stats import Rate

SCRAPE_INTERVAL_S = 1.0


@dataclasses.dataclass(frozen=True)
class MetricsCost:
    """Entries per second with metrics off and on, over every round of each."""

    off_eps: float
    on_eps: float
    off_cpu_us: float
    """CPU time of this process (the client, all its threads) per entry, metrics off."""
    on_cpu_us: float
    """The same with metrics on (serving the client's scrapes included)."""
    scrapes: int

    @property
    def overhead_pct(self) -> float:
        """How much lower the throughput was with metrics on, in percent."""
        return 100.0 * (1.0 - self.on_eps / self.off_eps)


_SCRAPE_LOOP = """
import sys, time, urllib.request
urls = sys.argv[2:]
interval = float(sys.argv[1])
scrapes = 0
while True:
    started = time.monotonic()
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                reply.read()
        except OSError as exc:
            sys.exit(f"scrape of {url} failed: {exc}")
    scrapes += 1
    print(scrapes, flush=True)
    time.sleep(max(0.0, interval - (time.monotonic() - started)))
"""


class _Scraper:
    """Serves ``registry`` on a free port of this process, as a service embedding the client
    would, and scrapes it and ``urls`` from another process every ``SCRAPE_INTERVAL_S``, as
    Prometheus would: the client pays for exposing its metrics, not for fetching the
    bookies'."""

    def __init__(self, registry: CollectorRegistry, urls: Sequence[str]) -> None:
        self._registry = registry
        self._urls = list(urls)
        self.scrapes = 0
        self._proc: subprocess.Popen[str] | None = None
        self._server: Any = None

    def __enter__(self) -> _Scraper:
        self._server, _ = prometheus_client.start_http_server(
            0, addr="127.0.0.1", registry=self._registry
        )
        own = f"http://127.0.0.1:{self._server.server_port}/metrics"
        command = [sys.executable, "-c", _SCRAPE_LOOP, str(SCRAPE_INTERVAL_S), own, *self._urls]
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._proc.terminate()
        out, _ = self._proc.communicate()
        lines = out.split()
        self.scrapes = int(lines[-1]) if lines else 0
        self._server.shutdown()
        self._server.server_close()


def measure(
    uri: str,
    seconds: float,
    bookie_metrics_urls: Sequence[str],
    *,
    rounds: int = 4,
    progress: Callable[[int], None] = lambda _: None,
) -> MetricsCost:
    """Run ``2 * rounds`` pipelined-append rounds of ``seconds`` each, half with metrics.

    Args:
        uri: the cluster's metadata URI.
        seconds: length of each round.
        bookie_metrics_urls: the bookies' ``/metrics`` URLs, scraped while metrics are on.
        rounds: rounds with metrics on (as many run with them off).
        progress: called with the number of entries confirmed now and then.
    """
    totals = {False: [0, 0.0, 0.0], True: [0, 0.0, 0.0]}  # enabled -> [entries, s, CPU s]
    scrapes = 0
    # Round -1 warms up (connections, allocator, the bookies' caches) and is not counted.
    for index in range(-1, 2 * rounds):
        enabled = index % 4 in (1, 2)  # off, on, on, off, ...
        registry = CollectorRegistry()
        metrics = walog.metrics.register(registry) if enabled else None

        async def one_round(metrics: walog.metrics.ClientMetrics | None) -> Rate:
            client = await walog.aio.connect(uri, metrics=metrics)
            try:
                return await scenarios.ledger_append(client, seconds, progress=progress)
            finally:
                await client.close()

        cpu_before = time.process_time()
        if enabled:
            with _Scraper(registry, bookie_metrics_urls) as scraper:
                rate = walog._loop.run(one_round(metrics))
            scrapes += scraper.scrapes
        else:
            rate = walog._loop.run(one_round(None))
        if index < 0:
            continue
        totals[enabled][0] += rate.ops
        totals[enabled][1] += rate.seconds
        totals[enabled][2] += time.process_time() - cpu_before
    off, on = totals[False], totals[True]
    return MetricsCost(
        off_eps=off[0] / off[1],
        on_eps=on[0] / on[1],
        off_cpu_us=off[2] * 1e6 / off[0],
        on_cpu_us=on[2] * 1e6 / on[0],
        scrapes=scrapes,
    )


__all__ = ["SCRAPE_INTERVAL_S", "MetricsCost", "measure"]
