"""Metadata stores: ZooKeeper (kazoo) and embedded SQLite, behind one interface.

:func:`open_store` picks the implementation from the URI (see :mod:`walog.metadata.uri`).

- ``store``: the interface (versioned records, compare-and-swap, sessions, watches);
- ``zookeeper`` and ``sqlite``: its two implementations; ``uri``: parsing the URIs;
- ``sqlite_schema``: the SQLite file's tables and format version;
- ``zookeeper_probe``: whether anything listens on ZooKeeper's ports (the commands ask first);
- ``layout``: where records live and the ledger metadata record;
- ``election``: leader suggestion with an epoch per term.
"""

from __future__ import annotations

from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError
from walog.metadata.uri import ACCEPTED_FORMS, SqliteURI, ZooKeeperURI, parse_uri


async def open_store(
    uri: str,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - the connection's limit, not a deadline
    call_timeout: float | None = None,
    create: bool = True,
) -> MetadataStore:
    """Open the metadata store named by ``uri``.

    Args:
        uri: ``zk://HOST:PORT[,HOST:PORT...]/CHROOT`` (the chroot is created if missing;
            without one, ``/walog``) or ``sqlite:///ABS/PATH.db``.
        timeout: seconds to wait for the connection.
        call_timeout: seconds each later call may take, retries included, before it fails
            with a retriable :class:`walog.errors.MetadataError` (for a change: outcome
            unknown); None: ``timeout``.
        create: create the store (the SQLite file, the ZooKeeper chroot) when it is
            missing; False for tools that only look at an existing cluster, where a
            missing store means a mistyped URI.

    Returns:
        A connected store; close it with :meth:`MetadataStore.close`.

    Raises:
        ValueError: the URI is malformed (the message names the accepted forms).
        walog.errors.NewerFormatError: the SQLite file's format version is newer than this
            walog reads (docs/compatibility.md).
        walog.errors.MetadataError: the store cannot be reached or opened.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    if call_timeout is not None and not call_timeout > 0:
        raise ValueError(f"call_timeout must be > 0 seconds, got {call_timeout}")
    config = parse_uri(uri)
    if isinstance(config, SqliteURI):
        from walog.metadata.sqlite import SqliteStore

        return await SqliteStore.open(
            config, timeout=timeout, call_timeout=call_timeout, create=create
        )
    from walog.metadata.zookeeper import ZooKeeperStore

    return await ZooKeeperStore.open(
        config, timeout=timeout, call_timeout=call_timeout, create=create
    )


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
