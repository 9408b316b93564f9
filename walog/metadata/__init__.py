"""Metadata stores: ZooKeeper (kazoo) and embedded SQLite, behind one interface."""

from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError

__all__ = ["MetadataStore", "NodeExistsError", "NodeNotFoundError"]
