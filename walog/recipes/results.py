"""The results of commands submitted with a client id and a seq, kept so that a retried
command answers with its first result (docs/statemachine.md, "Retrying a command").

Every node applies every record, so each keeps the results of the records of client
sessions it applied (the leader's own, the catch-up's and a standby's alike): a new leader
answers a command the previous one applied from what it applied itself. Kept per client
for the last :data:`walog.log.producers.WINDOW` seqs (the log refuses a retry older than
that anyway), and for at most :data:`MAX_CLIENTS` clients, the least recently used
forgotten first. Results are not in snapshots: a retry of a command applied before the
snapshot a node restored gets :class:`walog.recipes.CommandAppliedError`.

Pure: no I/O.
"""

from __future__ import annotations

import collections
from typing import Any

from walog.log.position import Record
from walog.log.producers import WINDOW
from walog.log.records import check_seq, producer_prefix
from walog.recipes.service import CommandAppliedError

MAX_CLIENTS = 1024
"""Clients whose results a node keeps at most."""

Outcome = tuple[Any, BaseException | None]
"""``apply``'s result, or the exception it raised."""


def command_key(client_id: str | None, seq: int | None) -> tuple[str, int] | None:
    """The (client, seq) of a command, None for one submitted without.

    Raises:
        ValueError: one given without the other, an empty or too long ``client_id``, a
            negative ``seq``.
        TypeError: ``client_id`` not a ``str``, ``seq`` not an ``int``.
    """
    if client_id is None and seq is None:
        return None
    if client_id is None or seq is None:
        raise ValueError(
            f"give a command both client_id and seq, or neither (got {client_id!r}, {seq!r})"
        )
    producer_prefix(client_id)
    return client_id, check_seq(seq)


class Results:
    """What ``apply`` returned for the recent commands of each client."""

    def __init__(self, window: int = WINDOW, max_clients: int = MAX_CLIENTS) -> None:
        self._window = window
        self._max = max_clients
        self._clients: collections.OrderedDict[str, collections.OrderedDict[int, Outcome]] = (
            collections.OrderedDict()
        )

    def applied(self, record: Record, result: Any, error: BaseException | None) -> None:
        """``record`` was applied with this outcome (kept when it names a client)."""
        if record.producer is None or record.seq is None:
            return
        seqs = self._clients.get(record.producer)
        if seqs is None:
            seqs = self._clients[record.producer] = collections.OrderedDict()
            if len(self._clients) > self._max:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(record.producer)
        seqs[record.seq] = (result, error)
        while len(seqs) > self._window:
            seqs.popitem(last=False)

    def first(self, record: Record) -> Outcome:
        """The outcome of ``record``, applied before: its first result for a command of a
        client, nothing for any other record (it is not answered again)."""
        if record.producer is None or record.seq is None:
            return None, None
        seqs = self._clients.get(record.producer)
        outcome = None if seqs is None else seqs.get(record.seq)
        if outcome is not None:
            return outcome
        return None, CommandAppliedError(
            f"command {record.seq} of client {record.producer!r} was applied at "
            f"{record.position}, but its result is no longer kept on this node"
        )


__all__ = ["MAX_CLIENTS", "Outcome", "Results", "command_key"]
