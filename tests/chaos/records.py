"""What chaos writers append and what they and the readers record, as plain functions.

A record's payload is ``KEY|PADDING``: ``KEY = "WRITER:INCARNATION:SEQ"`` names it and
``PADDING`` is derived from the key alone (length and bytes), so a reader can tell a record
that came back damaged from one that came back whole without any other state.

``INCARNATION`` counts the starts of one writer process: a restarted writer begins a new
incarnation at sequence 0, so a record it sent but never saw acknowledged (which may still be
in the log) can never share a key with a later one. ``(INCARNATION, SEQ)`` grows with every
append of a writer, so the log must hold each writer's records in that order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

MAX_PADDING = 600


@dataclasses.dataclass(frozen=True, order=True)
class RecordKey:
    """The identity of one appended record."""

    writer: int
    incarnation: int
    seq: int

    def __str__(self) -> str:
        return f"{self.writer}:{self.incarnation}:{self.seq}"

    @classmethod
    def parse(cls, text: str) -> RecordKey:
        """Inverse of ``str()``; ValueError on anything else."""
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(f"not a record key WRITER:INCARNATION:SEQ: {text!r}")
        writer, incarnation, seq = (int(part) for part in parts)
        return cls(writer, incarnation, seq)


def padding(key: RecordKey) -> bytes:
    """The deterministic padding of ``key`` (0..MAX_PADDING bytes)."""
    digest = hashlib.sha256(str(key).encode()).digest()
    length = int.from_bytes(digest[:2], "big") % (MAX_PADDING + 1)
    return (digest.hex().encode() * (length // 64 + 1))[:length]


def payload(key: RecordKey) -> bytes:
    """The bytes appended for ``key``."""
    return str(key).encode() + b"|" + padding(key)


def decode(data: bytes) -> tuple[RecordKey, bool]:
    """The key of a payload and whether the rest of it is intact.

    Raises:
        ValueError: the bytes do not even start with a key.
    """
    head, sep, rest = bytes(data).partition(b"|")
    if not sep:
        raise ValueError(f"payload without a key separator: {bytes(data[:40])!r}")
    key = RecordKey.parse(head.decode("ascii"))
    return key, rest == padding(key)


class JsonLines:
    """An append-only file of JSON lines, fsynced after each :meth:`write` batch.

    A writer process that is SIGKILLed loses at most the lines of the batch it was writing;
    a torn last line is skipped by :func:`read_json_lines`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, rows: list[dict[str, object]]) -> None:
        """Append ``rows`` and fsync them."""
        if not rows:
            return
        data = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


def read_json_lines(path: Path) -> Iterator[dict[str, object]]:
    """The rows of a :class:`JsonLines` file; a torn (unterminated) last line is skipped."""
    if not path.exists():
        return
    with path.open("rb") as file:
        for line in file:
            if not line.endswith(b"\n"):
                return  # the writer died in the middle of this line
            yield json.loads(line)
