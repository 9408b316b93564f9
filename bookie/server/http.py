"""The bookie's HTTP port (``--metrics-port``): ``/metrics``, ``/healthz``, ``/readyz``.

``/metrics`` is prometheus_client's exposition of the bookie's registry (text format, or
OpenMetrics when the scraper asks for it). ``/healthz`` and ``/readyz`` answer 200 or 503
with one line of text (bookie/server/health.py says what each means); ``/readyz?writes=1`` also
requires the bookie to accept adds. Requests are served by a small thread pool, so a scrape
never waits on the event loop and never blocks it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from bookie.server.health import BookieHealth

log = structlog.get_logger("bookie.server.http")

StartResponse = Callable[..., Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes and probes are not worth a log line each


def _text(start_response: StartResponse, ok: bool, line: str) -> Iterable[bytes]:
    body = (line + "\n").encode()
    status = "200 OK" if ok else "503 Service Unavailable"
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    )
    return [body]


class MetricsServer:
    """Serves the registry and the probes at ``http://host:port/``.

    Args:
        host: the interface to bind.
        port: the TCP port (0 picks a free one; see :attr:`port`).
        registry: the metrics served at ``/metrics``.
        health: answers ``/healthz`` and ``/readyz``.
    """

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, health: BookieHealth
    ) -> None:
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics_app(environ, start_response)  # type: ignore[no-any-return]
            if path == "/healthz":
                return _text(start_response, *health.alive())
            if path == "/readyz":
                query = parse_qs(environ.get("QUERY_STRING", ""))
                writes = query.get("writes", ["0"])[-1] not in ("", "0", "false")
                return _text(start_response, *health.ready(writes=writes))
            body = b"not found: this port serves /metrics, /healthz and /readyz\n"
            start_response(
                "404 Not Found",
                [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))],
            )
            return [body]

        self._httpd = make_server(
            host, port, app, server_class=ThreadingWSGIServer, handler_class=_QuietHandler
        )
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


__all__ = ["MetricsServer"]
