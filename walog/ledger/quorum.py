"""Round-robin distribution schedule and quorum coverage (docs/protocol.md, "Write quorums"
and "Coverage").

Pure rules, no I/O: the writer, recovery and the simulator all decide with these.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Ensemble indexes of the write quorum of ``entry_id``.

    The write quorum is the ``write_quorum`` bookies starting at index
    ``entry_id % ensemble_size`` of the fragment's ensemble, wrapping around.
    """
    start = entry_id % ensemble_size
    return [(start + i) % ensemble_size for i in range(write_quorum)]


def write_quorums(ensemble_size: int, write_quorum: int) -> list[list[int]]:
    """All distinct write quorums of an ensemble (there are ``ensemble_size`` of them,
    or one when ``write_quorum == ensemble_size``)."""
    if write_quorum == ensemble_size:
        return [list(range(ensemble_size))]
    return [write_set(i, ensemble_size, write_quorum) for i in range(ensemble_size)]


class Answer(enum.Enum):
    """What one bookie said, for coverage purposes."""

    UNKNOWN = "unknown"  # no answer yet, a timeout or an error: never counts as absent
    POSITIVE = "positive"  # an explicit answer of the kind being counted
    NEGATIVE = "negative"  # an explicit answer of another kind


def coverage_threshold(write_quorum: int, ack_quorum: int) -> int:
    """Explicit answers needed in a write quorum so that no ack quorum is left untouched."""
    return write_quorum - ack_quorum + 1


class QuorumCoverage:
    """Tracks whether explicit answers cover every write quorum of an ensemble.

    Coverage holds once, in every write quorum, at least ``Qw - Qa + 1`` bookies gave the
    counted answer: then every possible ack quorum contains one of them (docs/protocol.md,
    "Coverage"; BookKeeper's ``RRQuorumCoverageSet``). Timeouts and errors are
    :attr:`Answer.UNKNOWN` and never count.
    """

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        self._quorums = write_quorums(ensemble_size, write_quorum)
        self._need = coverage_threshold(write_quorum, ack_quorum)
        self._answers = [Answer.UNKNOWN] * ensemble_size

    def add(self, index: int, answer: Answer) -> None:
        """Record the answer of the bookie at ensemble ``index`` (the latest answer wins)."""
        self._answers[index] = answer

    def covered(self) -> bool:
        """True when every write quorum has enough POSITIVE answers."""
        return all(
            sum(1 for i in q if self._answers[i] is Answer.POSITIVE) >= self._need
            for q in self._quorums
        )

    def impossible(self) -> bool:
        """True when coverage can no longer be reached (too many NEGATIVE answers)."""
        return any(
            sum(1 for i in q if self._answers[i] is not Answer.NEGATIVE) < self._need
            for q in self._quorums
        )


def entry_absent(answers: Iterable[Answer], write_quorum: int, ack_quorum: int) -> bool:
    """Recovery rule: an entry is absent only when at least ``Qw - Qa + 1`` bookies of its
    write quorum explicitly said "no such entry" (POSITIVE here). Unknowns never count."""
    return sum(1 for a in answers if a is Answer.POSITIVE) >= coverage_threshold(
        write_quorum, ack_quorum
    )


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise ValueError unless ``ensemble_size >= write_quorum >= ack_quorum >= 1``."""
    if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
        raise ValueError(
            "quorums must satisfy ensemble_size >= write_quorum >= ack_quorum >= 1, got "
            f"ensemble_size={ensemble_size}, write_quorum={write_quorum}, ack_quorum={ack_quorum}"
        )


__all__ = [
    "Answer",
    "QuorumCoverage",
    "check_quorums",
    "coverage_threshold",
    "entry_absent",
    "write_quorums",
    "write_set",
]
