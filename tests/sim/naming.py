"""``ack_unnamed``: the writer acknowledges nothing the metadata does not name yet.

When an entry (or a log record) is acknowledged to the application, the metadata server's
records at that moment already name where it lives:

- a log record: the log's record lists its ledger (or the ledger lies before the log's
  first one: truncated away since);
- any entry of a PERSISTENT ledger: the fragment that the ledger's stored metadata gives the
  entry has ``Qa`` bookies of the entry's write set holding it (so a reader that asks that
  fragment's bookies, covering every write quorum, meets a copy).

A read barrier (walog.log.barrier) relies on it: it reads the metadata after its question
began, then asks only the bookies that metadata names. The checks read the simulated
metadata server and bookies directly, at the instant the acknowledgement is seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from walog.ledger.readops import write_set_bookies
from walog.log.log_metadata import LogMetadata
from walog.metadata.layout import LOGS, LedgerMetadata, ledger_path


def unnamed_entry(
    nodes: Mapping[str, Any], bookies: Mapping[str, Any], ledger_id: int, entry_id: int
) -> str | None:
    """Why the stored metadata of ``ledger_id`` does not name a fragment holding
    ``entry_id`` on ``Qa`` bookies of its write set; None when it does, when the ledger is
    gone (deleted since) or VOLATILE (whose acknowledgements promise no copy that lasts)."""
    node = nodes.get(ledger_path(ledger_id))
    if node is None:
        return None
    metadata = LedgerMetadata.from_json(node.data)
    if metadata.durability.name != "PERSISTENT":
        return None
    if metadata.is_closed and entry_id > metadata.last_entry_id:
        return None  # ack_beyond_close reports it
    write_set = write_set_bookies(metadata, entry_id)
    holders = [
        b for b in write_set if b in bookies and bookies[b].stored(ledger_id, entry_id) is not None
    ]
    if len(holders) >= metadata.ack_quorum:
        return None
    first = max(f for f, _ in metadata.ensembles if f <= entry_id)
    return (
        f"L{ledger_id} e{entry_id}: its fragment in the stored metadata (from e{first}, write "
        f"set {write_set}) holds it on {holders} only (Qa={metadata.ack_quorum})"
    )


def unlisted_ledger(nodes: Mapping[str, Any], ledger_id: int) -> str | None:
    """Why no log's stored record lists ``ledger_id``; None when one does, or when the
    ledger lies before some log's first ledger (truncated away since)."""
    heads: list[int] = []
    for path, node in nodes.items():
        if not path.startswith(LOGS + "/"):
            continue
        meta = LogMetadata.from_json(node.data)
        if ledger_id in meta.ledger_ids:
            return None
        if meta.ledger_ids:
            heads.append(min(meta.ledger_ids))
    if any(ledger_id < head for head in heads):
        return None
    return f"no log's record lists L{ledger_id}"


__all__ = ["unlisted_ledger", "unnamed_entry"]
