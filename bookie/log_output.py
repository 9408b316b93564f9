"""Structured logs of the bookie process: one JSON object per line on stderr.

Records of foreign libraries (grpc, kazoo) that use the standard ``logging`` module are
rendered the same way, so a log shipper sees a single format.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def configure_logging(level: str = "INFO", **context: Any) -> None:
    """Send structlog and standard-library logs to stderr as JSON lines.

    Args:
        level: the lowest level written (``DEBUG``, ``INFO``, ``WARNING``, ...).
        **context: key-value pairs added to every record (for example ``bookie_id``).
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    static = dict(context)

    def add_context(
        logger: Any, method: str, event: structlog.types.EventDict
    ) -> structlog.types.EventDict:
        # Static fields, not contextvars: gRPC runs each handler in a fresh context.
        for key, value in static.items():
            event.setdefault(key, value)
        return event

    shared: list[structlog.types.Processor] = [
        add_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=structlog.processors.JSONRenderer(),
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Chatty libraries: their INFO lines are about connections, not about the bookie.
    for noisy in ("kazoo", "grpc", "asyncio"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))


__all__ = ["configure_logging"]
