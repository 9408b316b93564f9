"""Where records live in the metadata store and how they are (de)serialised.

JSON documents, one per record. Paths:

- ``/ledgers/<id>``                 ledger metadata (:class:`LedgerMetadata`)
- ``/logs/<name>``                  log metadata (the ordered ledger list; walog.log)
- ``/logwriters/<name>/<epoch>``    liveness-bound registration of a log's writer
- ``/bookies/available/<id>``       liveness-bound registration of a serving bookie
- ``/bookies/readonly/<id>``        the same for a bookie serving reads only (full disks)
- ``/bookies/decommissioning/<id>`` a bookie being drained (``walog bookie decommission``)
- ``/underreplication/ledgers/<id>`` a ledger to repair (walog/autorecovery/daemon.py)
- ``/underreplication/locks/<id>``  liveness-bound lock of a ledger's repair
- ``/bookies/cookies/<id>``         a bookie's cookie (bookie/cookie.py)
- counter ``ledger-ids``            source of new ledger ids
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any, Literal

from walog.errors import NewerFormatError
from walog.format_versions import check_version
from walog.wire.durability import Durability

LEDGERS = "/ledgers"
LOGS = "/logs"
AVAILABLE_BOOKIES = "/bookies/available"
READ_ONLY_BOOKIES = "/bookies/readonly"
DECOMMISSIONING = "/bookies/decommissioning"
UNDER_REPLICATED = "/underreplication/ledgers"
REPAIR_LOCKS = "/underreplication/locks"
COOKIES = "/bookies/cookies"
LOG_WRITERS = "/logwriters"
LEDGER_ID_COUNTER = "ledger-ids"

LedgerState = Literal["OPEN", "IN_RECOVERY", "CLOSED"]

LEDGER_FORMAT = 1
"""The format version of ledger metadata records this walog writes, and the newest it reads
(``"format"`` in the record; a record without it is version 1)."""

DEFAULT_RACK = "default"
"""The rack of a bookie started without ``--rack`` (or registered before racks existed)."""
_RACK_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def check_rack_name(name: str) -> str:
    """``name`` when it is a valid rack name (1-64 letters, digits, ``.``, ``_``, ``-``).

    Raises:
        ValueError: naming the problem.
    """
    if not _RACK_NAME.fullmatch(name):
        raise ValueError(f"a rack name is 1-64 letters, digits, '.', '_' or '-', got {name!r}")
    return name


BOOKIE_RECORD_FORMAT = 1
"""The format version of bookie registrations (``"format"``; a record without it is
version 1) this walog writes, and the newest it reads."""


def registration_doc(record: bytes) -> dict[str, Any]:
    """A bookie's registration as a JSON object; ``{}`` when it is not one (damaged).

    Raises:
        NewerFormatError: the record's format is newer than :data:`BOOKIE_RECORD_FORMAT`
            (the message names the bookie and both versions).
    """
    try:
        doc = json.loads(record)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    what = f"bookie {doc.get('bookie_id', '?')}'s registration"
    try:
        check_version(
            what, doc.get("format", 1), BOOKIE_RECORD_FORMAT, ValueError, newer=NewerFormatError
        )
    except NewerFormatError:
        raise
    except ValueError:
        return {}
    return doc


def registered_rack(record: bytes) -> str:
    """The rack named by a bookie's availability record (:data:`DEFAULT_RACK` when it
    names none).

    Raises:
        NewerFormatError: as :func:`registration_doc`.
    """
    rack = registration_doc(record).get("rack")
    return rack if isinstance(rack, str) and rack else DEFAULT_RACK


def registered_max_entry_bytes(record: bytes) -> int | None:
    """The largest entry payload a bookie's availability record announces it stores (its
    ``--max-entry-bytes``), or None when the record does not say (a bookie from before
    the announcement).

    Raises:
        NewerFormatError: as :func:`registration_doc`.
    """
    limit = registration_doc(record).get("max_entry_bytes")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
    return None


def ledger_path(ledger_id: int) -> str:
    """Path of a ledger's metadata record."""
    return f"{LEDGERS}/{ledger_id}"


def log_path(name: str) -> str:
    """Path of a log's metadata record."""
    return f"{LOGS}/{name}"


def log_writers_path(name: str) -> str:
    """Parent of the registrations of log ``name``'s writers."""
    return f"{LOG_WRITERS}/{name}"


def log_writer_path(name: str, epoch: int) -> str:
    """Path of the registration of log ``name``'s writer that took it over as ``epoch``."""
    return f"{log_writers_path(name)}/{epoch}"


def bookie_path(bookie_id: str) -> str:
    """Path of a bookie's availability record."""
    return f"{AVAILABLE_BOOKIES}/{bookie_id}"


def read_only_bookie_path(bookie_id: str) -> str:
    """Path of a read-only bookie's registration (it serves reads, refuses new adds)."""
    return f"{READ_ONLY_BOOKIES}/{bookie_id}"


def decommission_path(bookie_id: str) -> str:
    """Path of the mark of a bookie being drained: it takes no new adds while it exists.

    Its existence is the mark: the bookie asks only whether it exists, never reads its data
    (:func:`decommission_mark`; one made by hand may hold nothing), so no reader has a
    version to check.
    """
    return f"{DECOMMISSIONING}/{bookie_id}"


DECOMMISSION_MARK_FORMAT = 1
"""The format version written in a decommission mark's data (``"format"``)."""


def decommission_mark(bookie_id: str, since: float) -> bytes:
    """The data of ``bookie_id``'s decommission mark, made at ``since`` (for people: the
    mark's existence is what the bookie follows)."""
    doc = {"format": DECOMMISSION_MARK_FORMAT, "bookie_id": bookie_id, "since": since}
    return json.dumps(doc).encode()


def under_replicated_path(ledger_id: int) -> str:
    """The record of a ledger published for repair: JSON ``{"lost": [bookie ids]}`` (by
    the auditor) or ``{"damaged_on": [bookie ids]}`` (by a bookie that found a damaged
    copy of one of its entries), each with its ``"format"`` (:func:`repair_record`)."""
    return f"{UNDER_REPLICATED}/{ledger_id}"


REPAIR_RECORD_FORMAT = 1
"""The format version of the repair records under :data:`UNDER_REPLICATED` this walog
writes, and the newest it reads (``"format"``; a record without it is version 1)."""


def repair_record(**fields: list[str]) -> bytes:
    """A repair record's bytes: ``fields`` (``lost``, ``damaged_on``) and its format."""
    return json.dumps({"format": REPAIR_RECORD_FORMAT, **fields}).encode()


def repair_doc(raw: bytes, ledger_id: int) -> dict[str, Any]:
    """Ledger ``ledger_id``'s repair record as a JSON object, its version checked.

    Raises:
        NewerFormatError: the record's format is newer than :data:`REPAIR_RECORD_FORMAT`
            (the message names the ledger and both versions).
        ValueError: the record is not a JSON object, or carries a version no walog writes.
    """
    what = f"ledger {ledger_id}'s repair record"
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{what} is not JSON (damaged?): {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a JSON object (damaged?): {doc!r}")
    check_version(
        what, doc.get("format", 1), REPAIR_RECORD_FORMAT, ValueError, newer=NewerFormatError
    )
    return doc


def repair_lock_path(ledger_id: int) -> str:
    """The liveness-bound lock of a ledger's repair."""
    return f"{REPAIR_LOCKS}/{ledger_id}"


def cookie_path(bookie_id: str) -> str:
    """Path of a bookie's cookie record."""
    return f"{COOKIES}/{bookie_id}"


@dataclasses.dataclass(frozen=True)
class LedgerMetadata:
    """A ledger's metadata (docs/protocol.md, "Ledger metadata").

    ``ensembles`` lists the fragments as ``(first_entry_id, [bookie_id, ...])``, oldest
    first. ``last_entry_id`` is -1 unless the ledger is CLOSED (then -1 means empty).
    ``password_check`` verifies a password without storing it (a hash that a guesser could
    test passwords against, so it stays out of ``repr``); ``ctime`` is the creation time in
    seconds since the epoch.
    """

    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState = "OPEN"
    last_entry_id: int = -1
    ensembles: tuple[tuple[int, tuple[str, ...]], ...] = ()
    durability: Durability = Durability.PERSISTENT
    custom_metadata: dict[str, str] | None = None
    password_check: str = dataclasses.field(default="", repr=False)
    ctime: float = dataclasses.field(default_factory=time.time)

    @property
    def is_closed(self) -> bool:
        """True when the state is CLOSED."""
        return self.state == "CLOSED"

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the fragment that holds ``entry_id``."""
        chosen = self.ensembles[0][1]
        for first, bookies in self.ensembles:
            if first > entry_id:
                break
            chosen = bookies
        return chosen

    def fragment_bounds(self) -> list[tuple[int, int, tuple[str, ...]]]:
        """``(first_entry_id, last_entry_id_or_-1_for_open_end, ensemble)`` per fragment."""
        out: list[tuple[int, int, tuple[str, ...]]] = []
        for i, (first, bookies) in enumerate(self.ensembles):
            last = self.ensembles[i + 1][0] - 1 if i + 1 < len(self.ensembles) else -1
            out.append((first, last, bookies))
        return out

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        """The ensemble of the last fragment (where new entries go)."""
        return self.ensembles[-1][1]

    def with_changes(self, **changes: Any) -> LedgerMetadata:
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> bytes:
        """Serialise for the metadata store."""
        doc = dataclasses.asdict(self)
        doc["durability"] = self.durability.value
        doc["ensembles"] = [[first, list(bookies)] for first, bookies in self.ensembles]
        doc["format"] = LEDGER_FORMAT
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LedgerMetadata:
        """Parse a record written by :meth:`to_json`, of any format up to
        :data:`LEDGER_FORMAT`.

        Raises:
            NewerFormatError: the record's format is newer than this walog reads (the
                message names both versions).
        """
        doc = json.loads(raw)
        found = doc.pop("format", 1)
        what = f"ledger {doc.get('ledger_id', '?')}'s metadata"
        check_version(what, found, LEDGER_FORMAT, NewerFormatError)
        doc["durability"] = Durability(doc["durability"])
        doc["ensembles"] = tuple((int(f), tuple(b)) for f, b in doc["ensembles"])
        return cls(**doc)


__all__ = [
    "AVAILABLE_BOOKIES",
    "BOOKIE_RECORD_FORMAT",
    "COOKIES",
    "DECOMMISSIONING",
    "DECOMMISSION_MARK_FORMAT",
    "DEFAULT_RACK",
    "LEDGERS",
    "LEDGER_FORMAT",
    "LEDGER_ID_COUNTER",
    "LOGS",
    "LOG_WRITERS",
    "READ_ONLY_BOOKIES",
    "REPAIR_LOCKS",
    "REPAIR_RECORD_FORMAT",
    "UNDER_REPLICATED",
    "LedgerMetadata",
    "LedgerState",
    "bookie_path",
    "check_rack_name",
    "cookie_path",
    "decommission_mark",
    "decommission_path",
    "ledger_path",
    "log_path",
    "log_writer_path",
    "log_writers_path",
    "read_only_bookie_path",
    "registered_max_entry_bytes",
    "registered_rack",
    "registration_doc",
    "repair_doc",
    "repair_lock_path",
    "repair_record",
    "under_replicated_path",
]
