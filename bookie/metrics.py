"""A tiny Prometheus text endpoint (``GET /metrics``) served from a daemon thread.

The counters are plain integers owned by the event loop; the HTTP thread only reads them,
so a scrape never waits on the loop and never blocks it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog

log = structlog.get_logger("bookie.metrics")

Sample = tuple[str, str, float]
"""``(name, type, value)``; type is ``counter`` or ``gauge``."""


def render(samples: list[Sample], labels: Mapping[str, str]) -> bytes:
    """Prometheus text exposition format (version 0.0.4) of ``samples``."""
    label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    lines = []
    for name, kind, value in samples:
        lines.append(f"# TYPE {name} {kind}")
        # Full precision: ``:g`` would round a counter of 1234567 to 1.23457e+06.
        text = str(int(value)) if float(value).is_integer() else repr(float(value))
        lines.append(f"{name}{{{label_text}}} {text}")
    return ("\n".join(lines) + "\n").encode()


class MetricsServer:
    """Serves ``collect()`` at ``http://host:port/metrics``.

    Args:
        host: the interface to bind.
        port: the TCP port (0 picks a free one; see :attr:`port`).
        collect: returns the current samples; called on the HTTP thread.
        labels: labels added to every sample (for example ``bookie``).
    """

    def __init__(
        self,
        host: str,
        port: int,
        collect: Callable[[], list[Sample]],
        labels: Mapping[str, str],
    ) -> None:
        collect_fn = collect
        label_map = dict(labels)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                body = render(collect_fn(), label_map)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes are not worth a log line each

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="metrics-http", daemon=True
        )

    def start(self) -> None:
        """Start serving in the background."""
        self._thread.start()
        log.info("metrics endpoint serving", port=self.port)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()


__all__ = ["MetricsServer", "Sample", "render"]
