"""Bookie configuration: the settings of the server process, :class:`BookieConfig`.

``BookieConfig`` maps 1:1 onto the flags of ``python -m bookie`` (bookie/main.py builds them
from its fields) and onto the keys of its ``--config`` file. A setting of the storage engine
(``StorageConfig``), of compaction (``CompactionPolicy``) or of read-only mode by disk usage
(``DiskThresholds``) is declared there, with its default, unit and help text, and taken over
here under the same name (:func:`walog.settings.same_as`); the process's own settings are
declared here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bookie.disks import DiskThresholds
from bookie.storage.compaction import CompactionPolicy
from bookie.storage.config import StorageConfig
from walog.config_file import ENV_METADATA
from walog.metadata.layout import DEFAULT_RACK, check_rack_name
from walog.metadata.uri import parse_uri
from walog.settings import flag_of, owned, same_as, setting, with_flag_names

GROUPS = ("storage", "journal", "network", "security", "maintenance")
"""The groups of ``python -m bookie --help`` (and of its example file), in order."""


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6addr]:PORT`` for IPv6) into host and port.

    Raises:
        ValueError: naming the problem when ``listen`` is not ``HOST:PORT`` with a port in
            1..65535 (port 0 is refused: the bookie id must stay the same across restarts).
    """
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"--listen port must be in 1..65535, got {port}")
    return host, port


@dataclasses.dataclass(frozen=True)
class BookieConfig:
    """Settings of one bookie process; each field is one flag and one key of the file.

    The bookie id is ``listen`` (``HOST:PORT``): clients find the bookie under that id in
    the metadata store and connect to that address, so it must be reachable by clients.
    A field's ``shown`` metadata is how ``--help`` shows a default that is no plain value.
    """

    data_dir: Path = same_as(StorageConfig, "data_dir", group="storage")
    listen: str = setting(
        help="the gRPC address HOST:PORT, and the bookie's id: clients find the bookie under "
        "it and connect to it, so it must be reachable and stay the same",
        group="network",
        metavar="HOST:PORT",
    )
    metadata: str = setting(
        help="the metadata store: zk://HOST:PORT[,...]/CHROOT or sqlite:///ABS/PATH.db",
        group="network",
        metavar="URI",
        env=ENV_METADATA,
    )
    rack: str = setting(
        DEFAULT_RACK,
        help="the rack (or zone) of this host, announced in the bookie's registration; "
        "rack-aware placement puts each write quorum on as many racks as it can",
        group="network",
        metavar="NAME",
    )
    native_port: int = setting(
        0,
        help="port of the native protocol (the same calls as frames over TCP or TLS) on the "
        "host of --listen; 0: any free port, announced to clients; -1: off",
        group="network",
    )
    native_socket: str = setting(
        "",
        help="Unix socket of the native protocol for clients on this host; 'off': none; "
        "never opened with TLS or with the native port off",
        group="network",
        metavar="PATH",
        shown="DATA_DIR/native.sock",
    )
    journal_dir: Path | None = same_as(
        StorageConfig, "journal_dir", group="journal", shown="DATA_DIR/journal"
    )
    metrics_port: int | None = setting(
        None,
        help="serve /metrics, /healthz and /readyz on this port of the --listen host",
        group="network",
        shown="off",
    )
    tls_cert: Path | None = setting(
        None,
        help="PEM certificate chain; with --tls-key the gRPC port speaks TLS only",
        group="security",
        shown="off",
    )
    tls_key: Path | None = setting(
        None, help="PEM private key of --tls-cert", group="security", shown="off"
    )
    tls_ca: Path | None = setting(
        None,
        help="PEM CA bundle: clients must present a certificate it signed (mutual TLS)",
        group="security",
        shown="off",
    )
    auth_token_file: Path | None = setting(
        None,
        help="clients must send 'authorization: Bearer <token>' with the token in this file; "
        "SIGHUP reads it again (rotation)",
        group="security",
        shown="off",
    )
    max_connections: int = setting(
        1024,
        help="native-protocol connections served at once; more are closed as they arrive",
        group="network",
    )
    auth_token_grace_s: float = setting(
        300.0,
        help="the previous token still works this long after SIGHUP loaded a new one",
        group="security",
    )
    allow_format: bool = setting(
        False,
        help="write a new cookie although disk and metadata disagree: the bookie then "
        "discards what it stored and acknowledged before (see --discard-instance)",
        group="maintenance",
    )
    discard_instance: str | None = setting(
        None,
        help="with --allow-format, where the disk lost the incarnation the metadata store "
        "names: its instance id, confirming that its acknowledged entries are re-replicated",
        group="maintenance",
        metavar="ID",
        shown="none",
    )
    cache_entry_logs: bool = same_as(StorageConfig, "cache_entry_logs", group="storage")
    write_cache_bytes: int = same_as(StorageConfig, "write_cache_bytes", group="storage")
    group_wait_s: float = same_as(StorageConfig, "group_wait_s", group="journal")
    group_max_bytes: int = same_as(StorageConfig, "group_max_bytes", group="journal")
    journal_file_bytes: int = same_as(StorageConfig, "journal_file_bytes", group="journal")
    volatile_flush_interval_s: float = same_as(
        StorageConfig, "volatile_flush_interval_s", group="journal"
    )
    max_inflight_bytes: int = setting(
        256 * 1024 * 1024,
        help="payload bytes of adds not answered yet; beyond it adds are answered "
        "TOO_MANY_REQUESTS (admission control)",
        group="network",
    )
    max_entry_bytes: int = same_as(StorageConfig, "max_entry_bytes", group="storage")
    entry_log_file_bytes: int = same_as(StorageConfig, "entry_log_file_bytes", group="storage")
    minor_compaction_threshold: float = same_as(
        CompactionPolicy, "minor_compaction_threshold", group="maintenance"
    )
    minor_compaction_interval_s: float = same_as(
        CompactionPolicy, "minor_compaction_interval_s", group="maintenance"
    )
    major_compaction_threshold: float = same_as(
        CompactionPolicy, "major_compaction_threshold", group="maintenance"
    )
    major_compaction_interval_s: float = same_as(
        CompactionPolicy, "major_compaction_interval_s", group="maintenance"
    )
    compaction_rate_bytes: int = same_as(
        CompactionPolicy, "compaction_rate_bytes", group="maintenance"
    )
    checkpoint_interval_s: float = same_as(StorageConfig, "checkpoint_interval_s", group="storage")
    gc_interval_s: float = setting(
        60.0,
        help="time between scans for ledgers deleted from the metadata store",
        group="maintenance",
    )
    gc_grace_s: float = setting(
        10.0,
        help="a ledger written to within this time is never collected (a margin: deletion "
        "is proven by a synced metadata read)",
        group="maintenance",
    )
    gc_stray_interval_s: float = setting(
        3600.0,
        help="time between scans for stray copies (closed ledgers whose ensembles no longer "
        "name this bookie); 0: off",
        group="maintenance",
    )
    gc_stray_grace_s: float = setting(
        3600.0,
        help="a copy written to within this time is never taken for a stray one (an "
        "auto-recovery may still be copying it)",
        group="maintenance",
    )
    disk_usage_threshold: float = same_as(DiskThresholds, "disk_usage_threshold", group="storage")
    disk_usage_warn_threshold: float = same_as(
        DiskThresholds, "disk_usage_warn_threshold", group="storage"
    )
    disk_usage_lwm_threshold: float = same_as(
        DiskThresholds, "disk_usage_lwm_threshold", group="storage"
    )
    disk_check_interval_s: float = setting(
        10.0, help="time between measurements of disk usage", group="storage"
    )
    drain_timeout_s: float = setting(
        5.0, help="on SIGTERM, the time granted to requests in flight", group="network"
    )
    metadata_timeout_s: float = setting(
        10.0, help="connecting to and calling the metadata store", group="network"
    )
    exit_with: int | None = setting(
        None,
        help="stop cleanly, as on SIGTERM, once process PID exits (e.g. the harness that "
        "started the bookie)",
        group="maintenance",
        metavar="PID",
        shown="off",
    )

    def __post_init__(self) -> None:
        parse_listen(self.listen)
        try:
            check_rack_name(self.rack)
        except ValueError as exc:
            raise ValueError(f"--rack: {exc}") from exc
        try:
            parse_uri(self.metadata)
        except ValueError as exc:
            raise ValueError(f"--metadata: {exc}") from exc
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key must be given together")
        if self.tls_ca is not None and self.tls_cert is None:
            raise ValueError("--tls-ca needs --tls-cert and --tls-key (mutual TLS)")
        if self.discard_instance is not None and not self.allow_format:
            raise ValueError("--discard-instance only confirms --allow-format; give both")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"--metrics-port must be in 0..65535, got {self.metrics_port}")
        if not -1 <= self.native_port <= 65535:
            raise ValueError(f"--native-port must be in -1..65535, got {self.native_port}")
        for name in (
            "max_inflight_bytes",
            "gc_interval_s",
            "disk_check_interval_s",
            "drain_timeout_s",
            "metadata_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{flag_of(name)} must be > 0, got {getattr(self, name)}")
        for name in ("gc_grace_s", "gc_stray_interval_s", "gc_stray_grace_s", "auth_token_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{flag_of(name)} must be >= 0, got {getattr(self, name)}")
        if self.max_connections < 1:
            raise ValueError(f"--max-connections must be >= 1, got {self.max_connections}")
        if self.exit_with is not None and self.exit_with <= 0:
            raise ValueError(f"--exit-with must be a process id > 0, got {self.exit_with}")
        names = [field.name for field in dataclasses.fields(self)]
        try:
            self.storage_config()
            self.disk_thresholds()
        except ValueError as exc:  # the owners name their fields; a user knows the flags
            raise ValueError(with_flag_names(str(exc), names)) from exc
        if self.max_inflight_bytes < self.max_entry_bytes:
            raise ValueError("--max-inflight-bytes must be at least --max-entry-bytes")

    def compaction_policy(self) -> CompactionPolicy:
        """The compaction settings."""
        return CompactionPolicy(**owned(self, CompactionPolicy))

    def disk_thresholds(self) -> DiskThresholds:
        """The usage marks of read-only mode."""
        return DiskThresholds(**owned(self, DiskThresholds))

    def storage_config(self) -> StorageConfig:
        """The storage engine's settings."""
        return StorageConfig(**owned(self, StorageConfig), compaction=self.compaction_policy())

    @property
    def bookie_id(self) -> str:
        """The bookie id, ``HOST:PORT`` as given to ``--listen``."""
        return self.listen

    @property
    def journal_path(self) -> Path:
        """The journal directory actually used (as :attr:`StorageConfig.journal_path`)."""
        return self.storage_config().journal_path

    @property
    def native_socket_path(self) -> Path | None:
        """The Unix socket to open, absolute; None when there is none: ``--native-socket
        off``, the native port off, or TLS (a local socket would skip the certificates)."""
        if self.native_socket == "off" or self.native_port < 0 or self.tls_enabled:
            return None
        path = Path(self.native_socket) if self.native_socket else self.data_dir / "native.sock"
        return path.absolute()

    @property
    def tls_enabled(self) -> bool:
        """True when the gRPC port speaks TLS."""
        return self.tls_cert is not None


__all__ = ["GROUPS", "BookieConfig", "parse_listen"]
