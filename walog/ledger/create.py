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
from walog.ledger.options import LedgerOptions
from walog.ledger.placement import PlacementPolicy, placement_policy
from walog.ledger.writer import AsyncLedgerWriter
from walog.metadata.layout import LEDGER_ID_COUNTER, LedgerMetadata, ledger_path
from walog.wire.digest import master_key as derive_master_key


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


def _check_custom_metadata(custom_metadata: Mapping[str, str] | None) -> None:
    if custom_metadata is not None and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in custom_metadata.items()
    ):
        raise TypeError("custom_metadata must map str to str")


async def create_ledger(
    ctx: LedgerContext,
    options: LedgerOptions,
    *,
    custom_metadata: Mapping[str, str] | None = None,
    placement: PlacementPolicy | None = None,
) -> AsyncLedgerWriter:
    """Create a ledger with ``options`` (checked when they were built) and return its writer.

    Raises:
        TypeError: ``custom_metadata`` does not map str to str.
        NotEnoughBookiesError: fewer than ``ensemble_size`` bookies are available.
    """
    _check_custom_metadata(custom_metadata)
    ensemble_size, write_quorum = options.ensemble_size, options.write_quorum
    key = derive_master_key(options.password)
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
        ack_quorum=options.ack_quorum,
        state="OPEN",
        ensembles=((0, tuple(ensemble)),),
        durability=options.durability,
        custom_metadata=dict(custom_metadata) if custom_metadata is not None else None,
        password_check=password_check(key),
    )
    # A fresh id is never reused, so a plain create is the CAS here (NodeExistsError would
    # mean a broken counter and is not retried).
    version = await ctx.store.create(ledger_path(ledger_id), metadata.to_json())
    return AsyncLedgerWriter(ctx, metadata, version, key, placement=placement)


__all__ = ["create_ledger", "password_check", "verify_password"]
