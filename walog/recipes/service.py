"""What a replicated service supplies to the state-machine recipe."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any, Protocol

from walog.errors import WalogError
from walog.log.position import Position, Record


class Service(Protocol):
    """What a replicated service supplies. Called on the event loop, one at a time.

    ``apply`` must be deterministic: every node applies the same records in the same order
    and must reach the same state. Its return value (or exception) is the command's result
    on the leader; standbys discard it. Use ``record.data`` and ``record.position``: the
    leader sees its own record's local submit time as ``record.timestamp``, so a service
    that needs time puts it into the command.
    """

    def apply(self, record: Record) -> Any:
        """Apply one record to the state."""

    def snapshot(self) -> bytes | Iterable[bytes]:
        """The whole state now, as bytes or an iterable of byte chunks (consumed at once)."""

    def restore(self, data: IO[bytes], position: Position) -> None:
        """Replace the whole state with a snapshot's; ``position`` is where it resumes."""


class NotLeaderError(WalogError):
    """This node does not serve commands now (it is a standby, catching up, or stopped)."""


class CommandInDoubtError(WalogError):
    """The node stopped leading before the command's record was acknowledged: the record may
    or may not be in the log. If it is, every node applies it. A command submitted with a
    ``client_id`` and ``seq`` is retried safely with the same pair on the new leader: it is
    applied once and answered with its first result; retry any other command only if it is
    idempotent or the state shows it was not applied."""


class CommandAppliedError(WalogError):
    """A retried command (same ``client_id`` and ``seq``) was applied already, but its
    result is no longer kept on this node (it was applied before the snapshot the node
    restored, or is older than the results kept per client)."""


__all__ = ["CommandAppliedError", "CommandInDoubtError", "NotLeaderError", "Service"]
