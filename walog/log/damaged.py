"""Fields of a stored log record that do not parse, kept apart so the rest stays usable.

A log's record (walog.log.log_metadata) has a core, the format, the writer epoch and the
ledger list, without which there is no log, and marks that callers and jobs add beside it:
cursors, the archived-through and truncated-through positions, snapshots, sinks, the
archive's intent and location, pending deletions, the orphan scan watermark. A mark that
does not parse (written by an older version, by hand, or by a caller before the API checked
its positions) is set aside as a :class:`DamagedField` instead of failing the whole record:
writers, readers, Spark, ``walog status`` and ``delete_log`` keep working and name it.

The raw value of a damaged field is written back unchanged by every CAS until a valid value
replaces it (a cursor committed again, a new archived-through mark) or ``walog log repair``
removes it: nothing is dropped behind the operator's back. While a mark that holds data
back (a cursor, a snapshot, the archived-through mark, a pending deletion) is damaged,
retention deletes nothing, since it cannot know what that mark protects.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

HOLDS_DATA = frozenset({"cursors", "snapshots", "archived_through", "pending_deletion"})
"""Fields whose damage stops retention: each may protect records from deletion."""


@dataclasses.dataclass(frozen=True, slots=True)
class DamagedField:
    """A field (or one item of a field) of a stored log record that does not parse.

    Attributes:
        field: the record's key (``"cursors"``, ``"archived_through"``, ...).
        item: the cursor, sink or snapshot (its index) within ``field``; None for the
            whole field.
        raw: the stored JSON value, written back unchanged until repaired.
        problem: why it does not parse.
    """

    field: str
    item: str | None
    raw: Any
    problem: str

    @property
    def name(self) -> str:
        """How people name it: ``archived_through`` or ``cursors['billing']``."""
        return self.field if self.item is None else f"{self.field}[{self.item!r}]"

    def describe(self) -> str:
        """One line: the field, its stored value and why it does not parse."""
        return f"{self.name} = {self.raw!r} does not parse ({self.problem})"


class Fields:
    """Parses the marks of one record, collecting what does not parse (see module doc)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = doc
        self.damaged: list[DamagedField] = []

    def one(self, field: str, parse: Callable[[Any], T], default: T) -> T:
        """The field parsed, or ``default`` (and the field set aside) when it does not parse.
        An absent field is ``default``."""
        if field not in self._doc:
            return default
        raw = self._doc[field]
        try:
            return parse(raw)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            self.damaged.append(DamagedField(field, None, raw, str(exc) or type(exc).__name__))
            return default

    def mapping(self, field: str, parse: Callable[[Any], T]) -> dict[str, T]:
        """A ``{name: value}`` field, each value parsed on its own: a bad one is set aside,
        the others kept."""
        raw = self._doc.get(field, {})
        if not isinstance(raw, dict):
            self.damaged.append(DamagedField(field, None, raw, "not a JSON object"))
            return {}
        out: dict[str, T] = {}
        for key, value in raw.items():
            try:
                out[str(key)] = parse(value)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                self.damaged.append(DamagedField(field, str(key), value, str(exc)))
        return out

    def sequence(self, field: str, parse: Callable[[Any], T]) -> tuple[T, ...]:
        """A list field, each item parsed on its own (a bad one set aside by its index)."""
        raw = self._doc.get(field, [])
        if not isinstance(raw, list):
            self.damaged.append(DamagedField(field, None, raw, "not a JSON list"))
            return ()
        out: list[T] = []
        for index, value in enumerate(raw):
            try:
                out.append(parse(value))
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                self.damaged.append(DamagedField(field, str(index), value, str(exc)))
        return tuple(out)


def write_back(doc: dict[str, Any], damaged: tuple[DamagedField, ...]) -> None:
    """Put the raw values of ``damaged`` back into ``doc`` (a record being written) where
    no valid value replaced them: a whole field whose value is still empty, an item its
    field does not hold. Items of a list go after the valid ones."""
    for bad in damaged:
        current = doc.get(bad.field)
        if bad.item is None:
            if current in (None, 0, [], {}):
                doc[bad.field] = bad.raw
        elif isinstance(current, list) or (current is None and bad.item.isdigit()):
            doc[bad.field] = [*(current or []), bad.raw]
        elif isinstance(current, dict) or current is None:
            items = dict(current or {})
            items.setdefault(bad.item, bad.raw)
            doc[bad.field] = items


def without(
    damaged: tuple[DamagedField, ...], field: str, item: str | None = None
) -> tuple[DamagedField, ...]:
    """``damaged`` less the entries of ``field`` (only ``item`` of it, when given): a valid
    value now stands there."""
    return tuple(d for d in damaged if not (d.field == field and (item is None or d.item == item)))


__all__ = ["HOLDS_DATA", "DamagedField", "Fields", "without", "write_back"]
