"""What metrics cost the append path: pipelined appends with client metrics off and on.

Rounds come in pairs, off then on or on then off alternately, so a slow drift of the
machine's load weighs on both sides alike. While metrics are on, the client's registry
is served over HTTP from this process and another process scrapes it and every bookie's
``/metrics`` once a second, as Prometheus would.
"""

from __future__ import annotations

import dataclasses
import statistics
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
    """Entries per second with metrics off and on (medians of the rounds)."""

    off_eps: float
    on_eps: float
    off_cpu_us: float
    """CPU time of this process (the client, all its threads) per entry, metrics off."""
    on_cpu_us: float
    """The same with metrics on (serving the client's scrapes included)."""
    scrapes: int
    overhead_pct: float
    """How much lower the throughput was with metrics on, in percent (median of pairs)."""


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
    pairs: int = 6,
    progress: Callable[[int], None] = lambda _: None,
) -> MetricsCost:
    """Run ``pairs`` pairs of pipelined-append rounds of ``seconds`` each, one round of each
    pair with metrics; the overhead is the median over the pairs, so a burst of other load
    on the machine skews one pair, not the figure.

    Args:
        uri: the cluster's metadata URI.
        seconds: length of each round.
        bookie_metrics_urls: the bookies' ``/metrics`` URLs, scraped while metrics are on.
        pairs: how many pairs (each runs off then on, or on then off, alternately).
        progress: called with the number of entries confirmed now and then.
    """

    async def one_round(metrics: walog.metrics.ClientMetrics | None) -> tuple[Rate, float]:
        """The appends' rate and the CPU seconds of this process while they ran (connecting,
        starting the scraper and the like are left out: they cost the same per round, not
        per entry)."""
        client = await walog.aio.connect(uri, metrics=metrics)
        try:
            cpu_before = time.process_time()
            rate = await scenarios.ledger_append(client, seconds, progress=progress)
            return rate, time.process_time() - cpu_before
        finally:
            await client.close()

    def run(enabled: bool) -> tuple[float, float, int]:
        """Entries per second, client CPU us per entry, scrapes."""
        if enabled:
            registry = CollectorRegistry()
            with _Scraper(registry, bookie_metrics_urls) as scraper:
                rate, cpu_s = walog._loop.run(one_round(walog.metrics.register(registry)))
            scrapes = scraper.scrapes
        else:
            (rate, cpu_s), scrapes = walog._loop.run(one_round(None)), 0
        return rate.ops / rate.seconds, cpu_s * 1e6 / max(rate.ops, 1), scrapes

    run(False)  # warm-up (connections, allocator, the bookies' caches): not counted
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpus: dict[bool, list[float]] = {False: [], True: []}
    scrapes = 0
    for pair in range(pairs):
        for enabled in (False, True) if pair % 2 == 0 else (True, False):
            eps, cpu_us, scraped = run(enabled)
            rates[enabled].append(eps)
            cpus[enabled].append(cpu_us)
            scrapes += scraped
    ratios = [on / off for off, on in zip(rates[False], rates[True], strict=True)]
    return MetricsCost(
        off_eps=statistics.median(rates[False]),
        on_eps=statistics.median(rates[True]),
        off_cpu_us=statistics.median(cpus[False]),
        on_cpu_us=statistics.median(cpus[True]),
        scrapes=scrapes,
        overhead_pct=100.0 * (1.0 - statistics.median(ratios)),
    )


__all__ = ["SCRAPE_INTERVAL_S", "MetricsCost", "measure"]
