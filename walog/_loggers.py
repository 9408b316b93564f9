"""Loggers of the library: structlog key-value events handed to the standard ``logging``.

A library must not print on its own: events go to ``logging.getLogger(name)``, so the
application's logging set-up decides levels and destinations. The ``walog`` logger carries a
``NullHandler`` (the standard library's convention for libraries): an application that set
nothing up sees nothing, not even Python's last-resort WARNING lines on stderr; one that
configures logging gets walog's events through its own handlers. Events below the logger's
level cost one level check.

The libraries walog drives log too (kazoo logs every lost connection and reconnect attempt
on its own loggers, which have no handler: Python's last resort prints their warnings on
stderr). :func:`adopt` hands such a library's records to a logger under ``walog`` instead,
so they follow walog's rules: nothing without a logging set-up, the application's handlers
with one, and ``walog`` commands show them only when ``WALOG_LOG_LEVEL`` asks.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog


def _render(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[str], dict[str, Any]]:
    """``event key=value ...``: the event first, then its context; an exception goes to
    ``logging`` as ``exc_info`` so its handlers format the traceback."""
    event = str(event_dict.pop("event", ""))
    exc_info = event_dict.pop("exc_info", None)
    context = " ".join(f"{key}={value!r}" for key, value in event_dict.items())
    message = f"{event} {context}" if context else event
    return (message,), ({"exc_info": exc_info} if exc_info else {})


logging.getLogger("walog").addHandler(logging.NullHandler())


class _Forward(logging.Handler):
    """Re-emits a foreign library's records on a logger under ``walog``."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self.target.isEnabledFor(record.levelno):
            record.name = f"{self.target.name}.{record.name}"
            self.target.handle(record)


def adopt(foreign: str, under: str) -> None:
    """Send the records of library logger ``foreign`` (and its children) to logger
    ``under`` (a ``walog`` logger) instead of the root logger's handlers or stderr.
    Idempotent."""
    logger = logging.getLogger(foreign)
    if any(isinstance(h, _Forward) for h in logger.handlers):
        return
    logger.addHandler(_Forward(logging.getLogger(under)))
    logger.propagate = False


def get_logger(name: str) -> Any:
    """A structlog bound logger writing ``event key=value ...`` lines to stdlib ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.stdlib.filter_by_level,
            _render,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


__all__ = ["adopt", "get_logger"]
