"""Metadata stores: ZooKeeper (kazoo) and embedded SQLite, behind one interface.

:func:`open_store` picks the implementation from the URI (see :mod:`walog.metadata.uri`).

- ``store``: the interface (versioned records, compare-and-swap, sessions, watches);
- ``zookeeper`` and ``sqlite``: its two implementations; ``uri``: parsing the URIs;
- ``layout``: where records live and the ledger metadata record;
- ``election``: leader suggestion with an epoch per term.
"""

from __future__ import annotations

from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError
from walog.metadata.uri import ACCEPTED_FORMS, SqliteURI, ZooKeeperURI, parse_uri


async def open_store(
    uri: str,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - per-call limit of the store, not a deadline
) -> MetadataStore:
    """Open the metadata store named by ``uri``.

    Args:
        uri: ``zk://HOST:PORT[,HOST:PORT...]/CHROOT`` (the chroot is created if missing;
            without one, ``/walog``) or ``sqlite:///ABS/PATH.db``.
        timeout: seconds to wait for the connection and, later, for each call.

    Returns:
        A connected store; close it with :meth:`MetadataStore.close`.

    Raises:
        ValueError: the URI is malformed (the message names the accepted forms).
        walog.errors.MetadataError: the store cannot be reached or opened.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    config = parse_uri(uri)
    if isinstance(config, SqliteURI):
        from walog.metadata.sqlite import SqliteStore

        return await SqliteStore.open(config, timeout=timeout)
    from walog.metadata.zookeeper import ZooKeeperStore

    return await ZooKeeperStore.open(config, timeout=timeout)


__all__ = [
    "ACCEPTED_FORMS",
    "MetadataStore",
    "NodeExistsError",
    "NodeNotFoundError",
    "SqliteURI",
    "ZooKeeperURI",
    "open_store",
    "parse_uri",
]
