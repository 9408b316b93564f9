"""Loggers of the library: structlog key-value events handed to the standard ``logging``.

A library must not print on its own: events go to ``logging.getLogger(name)``, so the
application's logging set-up decides levels and destinations. The ``walog`` logger carries a
``NullHandler`` (the standard library's convention for libraries): an application that set
nothing up sees nothing, not even Python's last-resort WARNING lines on stderr; one that
configures logging gets walog's events through its own handlers. Events below the logger's
level cost one level check.
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


__all__ = ["get_logger"]
