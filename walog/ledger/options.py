"""How a ledger is created: one :class:`LedgerOptions` object, checked by one rule.

Every path that creates ledgers holds its settings in a :class:`LedgerOptions`: a client's
``create_ledger`` (sync and async), a log's writer (its first ledger, takeovers and rolls),
the log sink's copies, state-machine snapshots and the Spark sink. Building one runs
:func:`check_ledger_options`, the one check of the quorums, the durability and the password
(docs/protocol.md, "Quorums"), so a bad setting is refused where it is given, with one
message naming the value, whichever path it came in by.
"""

from __future__ import annotations

import dataclasses

from walog.wire.durability import Durability

QUORUM_RULE = "ensemble_size >= write_quorum >= ack_quorum >= 1"
"""The order every ledger's quorums keep."""


def check_ledger_options(
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    durability: Durability = Durability.PERSISTENT,
    password: bytes = b"",
) -> None:
    """Refuse settings a ledger cannot be created with, naming the bad value.

    Raises:
        TypeError: a quorum that is not a whole number, a durability that is not a
            :class:`walog.Durability`, or a password that is not bytes.
        ValueError: quorums out of ``ensemble_size >= write_quorum >= ack_quorum >= 1``,
            or a VOLATILE ledger striped (``ensemble_size != write_quorum``).
    """
    sizes = {
        "ensemble_size": ensemble_size,
        "write_quorum": write_quorum,
        "ack_quorum": ack_quorum,
    }
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be a whole number, got {value!r}")
    if ack_quorum < 1:
        raise ValueError(f"ack_quorum={ack_quorum} is below 1 (need {QUORUM_RULE})")
    if write_quorum < ack_quorum:
        raise ValueError(
            f"write_quorum={write_quorum} is below ack_quorum={ack_quorum} (need {QUORUM_RULE})"
        )
    if ensemble_size < write_quorum:
        raise ValueError(
            f"write_quorum={write_quorum} is above ensemble_size={ensemble_size} "
            f"(need {QUORUM_RULE})"
        )
    if not isinstance(durability, Durability):
        raise TypeError(f"durability must be a walog.Durability, got {durability!r}")
    if durability is Durability.VOLATILE and ensemble_size != write_quorum:
        raise ValueError(
            "Durability.VOLATILE ledgers cannot be striped: ensemble_size must equal "
            f"write_quorum, got ensemble_size={ensemble_size}, write_quorum={write_quorum}"
        )
    if not isinstance(password, bytes | bytearray | memoryview):
        raise TypeError(f"password must be bytes, got {type(password).__name__}")


@dataclasses.dataclass(frozen=True)
class LedgerOptions:
    """How a ledger is created (the keyword arguments of ``Client.create_ledger``).

    Checked when built (:func:`check_ledger_options`).

    Attributes:
        ensemble_size: E, the bookies the ledger's entries are striped over.
        write_quorum: Qw, the bookies each entry is written to.
        ack_quorum: Qa, the acknowledgements an entry needs to be confirmed.
        durability: whether bookies sync an entry before acknowledging it.
        password: the ledger's password (readers and recovery need it).
    """

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    durability: Durability = Durability.PERSISTENT
    password: bytes = b""

    def __post_init__(self) -> None:
        check_ledger_options(
            self.ensemble_size, self.write_quorum, self.ack_quorum, self.durability, self.password
        )
        object.__setattr__(self, "password", bytes(self.password))


__all__ = ["QUORUM_RULE", "LedgerOptions", "check_ledger_options"]
