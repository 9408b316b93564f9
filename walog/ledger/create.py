"""Creating a ledger (docs/protocol.md, "Ledger metadata" and "Quorums").

Check the quorums, pick ``E`` available bookies, take a new id from the ledger-id counter and
CAS-create the metadata: state OPEN, one fragment starting at entry 0, and a password check
(a hash of the master key, so a wrong password is refused without storing it).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from walog.errors import UnauthorizedError
from walog.ledger.context import LedgerContext, metadata_retrying
from walog.ledger.ensemble import placement_candidates
from walog.ledger.placement import PlacementPolicy, placement_policy
from walog.ledger.quorum import check_quorums
from walog.ledger.writer import AsyncLedgerWriter
from walog.metadata.layout import LEDGER_ID_COUNTER, LedgerMetadata, ledger_path
from walog.wire.digest import master_key as derive_master_key
from walog.wire.durability import Durability


def password_check(master_key: bytes) -> str:
    """The value stored in ``LedgerMetadata.password_check`` for a master key."""
    return hashlib.sha256(b"walog-password-check:" + master_key).hexdigest()


def verify_password(metadata: LedgerMetadata, password: bytes) -> bytes:
    """Return the ledger's master key for ``password``.

    Raises:
        UnauthorizedError: the password does not match the one the ledger was created with.
    """
    key = derive_master_key(_password_bytes(password))
    if metadata.password_check and not hmac.compare_digest(
        metadata.password_check, password_check(key)
    ):
        raise UnauthorizedError(f"wrong password for ledger {metadata.ledger_id}")
    return key


def _password_bytes(password: object) -> bytes:
    if not isinstance(password, bytes | bytearray | memoryview):
        raise TypeError(f"password must be bytes, got {type(password).__name__}")
    return bytes(password)


def validate_ledger_options(
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    durability: Durability,
    custom_metadata: Mapping[str, str] | None,
) -> None:
    """Raise ValueError/TypeError for options a ledger cannot be created with."""
    check_quorums(ensemble_size, write_quorum, ack_quorum)
    if not isinstance(durability, Durability):
        raise TypeError(f"durability must be a walog.Durability, got {durability!r}")
    if durability is Durability.VOLATILE and ensemble_size != write_quorum:
        raise ValueError(
            "Durability.VOLATILE ledgers cannot be striped: ensemble_size must equal "
            f"write_quorum, got ensemble_size={ensemble_size}, write_quorum={write_quorum}"
        )
    if custom_metadata is not None and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in custom_metadata.items()
    ):
        raise TypeError("custom_metadata must map str to str")


async def create_ledger(
    ctx: LedgerContext,
    ensemble_size: int = 3,
    write_quorum: int = 3,
    ack_quorum: int = 2,
    *,
    durability: Durability = Durability.PERSISTENT,
    password: bytes = b"",
    custom_metadata: Mapping[str, str] | None = None,
    placement: PlacementPolicy | None = None,
) -> AsyncLedgerWriter:
    """Create a ledger and return its writer.

    Raises:
        ValueError: unless ``ensemble_size >= write_quorum >= ack_quorum >= 1``, or a
            VOLATILE ledger with ``ensemble_size != write_quorum``.
        NotEnoughBookiesError: fewer than ``ensemble_size`` bookies are available.
    """
    validate_ledger_options(ensemble_size, write_quorum, ack_quorum, durability, custom_metadata)
    key = derive_master_key(_password_bytes(password))
    placement = placement_policy(placement)
    async for attempt in metadata_retrying():
        with attempt:
            available, racks = await placement_candidates(ctx.store, placement)
    ensemble = placement.choose_ensemble(available, ensemble_size, write_quorum, racks)
    async for attempt in metadata_retrying():
        with attempt:
            ledger_id = await ctx.store.next_id(LEDGER_ID_COUNTER)
    metadata = LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        state="OPEN",
        ensembles=((0, tuple(ensemble)),),
        durability=durability,
        custom_metadata=dict(custom_metadata) if custom_metadata is not None else None,
        password_check=password_check(key),
    )
    # A fresh id is never reused, so a plain create is the CAS here (NodeExistsError would
    # mean a broken counter and is not retried).
    version = await ctx.store.create(ledger_path(ledger_id), metadata.to_json())
    return AsyncLedgerWriter(ctx, metadata, version, key, placement=placement)


__all__ = ["create_ledger", "password_check", "validate_ledger_options", "verify_password"]
