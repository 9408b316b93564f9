"""Bookie configuration: the server process settings (the storage engine's own are
``bookie.storage.config.StorageConfig``).

``BookieConfig`` maps 1:1 onto the flags of ``python -m bookie`` (see bookie/main.py);
every default is documented once, here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bookie.disks import DiskThresholds
from bookie.storage.compaction import CompactionPolicy
from bookie.storage.config import StorageConfig
from walog.metadata.layout import DEFAULT_RACK, check_rack_name
from walog.metadata.uri import parse_uri
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES

_METADATA_SCHEMES = ("zk://", "sqlite:///")
_MIB = 1024 * 1024


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
    """Settings of one bookie process; each field is one command-line flag.

    The bookie id is ``listen`` (``HOST:PORT``): clients find the bookie under that id in
    the metadata store and connect to that address, so it must be reachable by clients.
    """

    data_dir: Path
    """``--data-dir``: entry logs, index, checkpoints and the on-disk cookie."""
    listen: str
    """``--listen HOST:PORT``: the gRPC address; also the bookie id."""
    metadata: str
    """``--metadata URI``: ``zk://HOST:PORT[,...]/CHROOT`` or ``sqlite:///ABS/PATH.db``."""
    rack: str = DEFAULT_RACK
    """``--rack NAME``: the rack (or zone) of the bookie's host, announced in its registration
    and ``Info``; rack-aware placement puts each write quorum on as many racks as it can."""
    native_port: int = 0
    """``--native-port``: the port of the native protocol (the same calls as frames over TCP
    or TLS, cheaper per message than gRPC) on the host of ``listen``; 0 (the default) takes
    any free port, announced to clients through ``Info``; -1 turns it off."""
    native_socket: str = ""
    """``--native-socket PATH``: a Unix socket speaking the native protocol too, for clients
    on this host (cheaper per message than TCP); "" (the default): ``DATA_DIR/native.sock``;
    ``off``: none. Never opened with TLS or with the native port off (see
    :attr:`native_socket_path`)."""
    journal_dir: Path | None = None
    """``--journal-dir``: the journal's directory (a separate disk); default: ``data_dir``."""
    metrics_port: int | None = None
    """``--metrics-port``: serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``HOST:N``;
    default off."""
    tls_cert: Path | None = None
    """``--tls-cert``: PEM certificate chain; with ``tls_key`` the port speaks TLS only."""
    tls_key: Path | None = None
    """``--tls-key``: PEM private key of ``tls_cert``."""
    tls_ca: Path | None = None
    """``--tls-ca``: PEM CA bundle; when given, clients must present a certificate it signed."""
    auth_token_file: Path | None = None
    """``--auth-token-file``: clients must send ``authorization: Bearer <token>``; re-read
    on SIGHUP."""
    max_connections: int = 1024
    """``--max-connections``: native-protocol connections served at once; more are closed
    as they arrive (a well-behaved client keeps one per bookie)."""
    auth_token_grace: float = 300.0
    """``--auth-token-grace``: seconds the previous token stays valid after SIGHUP loaded
    a new one from ``--auth-token-file``."""
    allow_format: bool = False
    """``--allow-format``: write a new cookie even though disk and metadata disagree (never
    deletes data). Not enough alone where a disk lost the incarnation the metadata store
    names: see ``discard_instance``."""
    discard_instance: str | None = None
    """``--discard-instance ID``: with ``allow_format``, the instance id (from the refusal
    message) of the incarnation whose disk state was lost; the confirmation that its
    acknowledged entries are no longer needed from this bookie."""
    cache_entry_logs: bool = False
    """``--cache-entry-logs``: keep what checkpoints write to entry logs in the page cache;
    by default the bookie drops it once synced (see ``StorageConfig.cache_entry_logs``)."""
    group_wait_ms: float = 0.0
    """``--group-wait-ms``: longest wait of a journal group commit for more entries; 0 (the
    default) commits as soon as the journal thread is free, and records arriving during
    a write and sync form the next group."""
    group_max_bytes: int = 512 * 1024
    """``--group-max-bytes``: a journal group commits once it holds this many bytes."""
    volatile_flush_interval: float = 1.0
    """``--volatile-flush-interval``: seconds between background syncs of VOLATILE entries
    (at least 1)."""
    max_inflight_bytes: int = 256 * 1024 * 1024
    """``--max-inflight-bytes``: payload bytes of unanswered adds; above it adds get
    TOO_MANY_REQUESTS (admission control)."""
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    """``--max-entry-bytes``: larger entries are refused with BAD_REQUEST."""
    entry_log_file_bytes: int = 512 * _MIB
    """``--entry-log-file-bytes``: an entry log is rolled over once it grows past this size;
    the log being filled is never compacted, so smaller logs give space back sooner."""
    minor_compaction_threshold: float = 0.2
    """``--minor-compaction-threshold``: minor compaction copies the entry logs whose live
    share is below this (bookie/storage/compaction.py)."""
    minor_compaction_interval: float = 3600.0
    """``--minor-compaction-interval``: seconds between minor compactions (0: off)."""
    major_compaction_threshold: float = 0.8
    """``--major-compaction-threshold``: major compaction copies the entry logs whose live
    share is below this."""
    major_compaction_interval: float = 86400.0
    """``--major-compaction-interval``: seconds between major compactions (0: off)."""
    compaction_rate_bytes: int = 32 * _MIB
    """``--compaction-rate-bytes``: most bytes per second compaction copies."""
    checkpoint_interval: float = 10.0
    """``--checkpoint-interval``: seconds between checkpoints (write cache to entry logs and
    index; journal files before the mark are then deleted), give or take a tenth
    (:func:`bookie.storage.checkpoints.checkpoint_wait`). A failed checkpoint is retried after
    this long."""
    gc_interval: float = 60.0
    """``--gc-interval``: seconds between scans for ledgers deleted from the metadata store."""
    gc_grace: float = 300.0
    """``--gc-grace``: a ledger written to within this many seconds is never collected."""
    gc_stray_interval: float = 3600.0
    """``--gc-stray-interval``: seconds between scans for stray copies (closed ledgers whose
    ensembles no longer name this bookie); 0 turns the scan off."""
    gc_stray_grace: float = 3600.0
    """``--gc-stray-grace``: a copy written to within this many seconds is never taken for a
    stray one (an auto-recovery may still be copying it)."""
    disk_usage_threshold: float = 0.95
    """``--disk-usage-threshold``: above this used share of its data or journal disk the
    bookie turns read-only (bookie/disks.py)."""
    disk_usage_warn_threshold: float = 0.90
    """``--disk-usage-warn-threshold``: above this used share a warning is logged."""
    disk_usage_lwm_threshold: float = 0.90
    """``--disk-usage-lwm-threshold``: a read-only bookie turns writable again once all its
    disks are used below this share (the low-water mark)."""
    disk_check_interval: float = 10.0
    """``--disk-check-interval``: seconds between measurements of disk usage."""
    drain_timeout: float = 5.0
    """``--drain-timeout``: on SIGTERM, seconds granted to in-flight requests."""
    metadata_timeout: float = 10.0
    """``--metadata-timeout``: connecting to and calling the metadata store."""
    exit_with: int | None = None
    """``--exit-with PID``: stop as on SIGTERM (a clean shutdown) once process ``PID`` exits,
    e.g. the harness that started the bookie, so that it never outlives a killed harness
    (bookie/exit_with.py); default off."""

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
        if self.group_wait_ms < 0:
            raise ValueError(f"--group-wait-ms must be >= 0, got {self.group_wait_ms}")
        positive = {
            "--group-max-bytes": self.group_max_bytes,
            "--volatile-flush-interval": self.volatile_flush_interval,
            "--max-inflight-bytes": self.max_inflight_bytes,
            "--max-entry-bytes": self.max_entry_bytes,
            "--gc-interval": self.gc_interval,
            "--entry-log-file-bytes": self.entry_log_file_bytes,
            "--checkpoint-interval": self.checkpoint_interval,
            "--disk-check-interval": self.disk_check_interval,
            "--drain-timeout": self.drain_timeout,
            "--metadata-timeout": self.metadata_timeout,
        }
        for flag, value in positive.items():
            if value <= 0:
                raise ValueError(f"{flag} must be > 0, got {value}")
        if self.volatile_flush_interval < 1.0:
            raise ValueError(
                f"--volatile-flush-interval must be >= 1 second, got {self.volatile_flush_interval}"
            )
        for flag, value in {
            "--gc-grace": self.gc_grace,
            "--gc-stray-interval": self.gc_stray_interval,
            "--gc-stray-grace": self.gc_stray_grace,
        }.items():
            if value < 0:
                raise ValueError(f"{flag} must be >= 0, got {value}")
        if self.max_inflight_bytes < self.max_entry_bytes:
            raise ValueError("--max-inflight-bytes must be at least --max-entry-bytes")
        if self.max_connections < 1:
            raise ValueError(f"--max-connections must be >= 1, got {self.max_connections}")
        if self.exit_with is not None and self.exit_with <= 0:
            raise ValueError(f"--exit-with must be a process id > 0, got {self.exit_with}")
        self.disk_thresholds()  # validates the three shares
        self.compaction_policy()

    def compaction_policy(self) -> CompactionPolicy:
        """The compaction settings derived from the flags.

        Raises:
            ValueError: naming the flags when they are inconsistent.
        """
        try:
            return CompactionPolicy(
                minor_threshold=self.minor_compaction_threshold,
                minor_interval_s=self.minor_compaction_interval,
                major_threshold=self.major_compaction_threshold,
                major_interval_s=self.major_compaction_interval,
                rate_bytes=self.compaction_rate_bytes,
            )
        except ValueError as exc:
            raise ValueError(
                f"--minor/--major-compaction-threshold/-interval, --compaction-rate-bytes: {exc}"
            ) from exc

    def disk_thresholds(self) -> DiskThresholds:
        """The usage marks of read-only mode derived from the flags."""
        return DiskThresholds(
            high=self.disk_usage_threshold,
            warn=self.disk_usage_warn_threshold,
            low=self.disk_usage_lwm_threshold,
        )

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

    def storage_config(self) -> StorageConfig:
        """The storage engine's settings derived from the flags."""
        return StorageConfig(
            data_dir=self.data_dir,
            journal_dir=self.journal_dir,
            group_wait_s=self.group_wait_ms / 1000.0,
            group_max_bytes=self.group_max_bytes,
            volatile_flush_interval_s=self.volatile_flush_interval,
            max_entry_bytes=self.max_entry_bytes,
            cache_entry_logs=self.cache_entry_logs,
            checkpoint_interval_s=self.checkpoint_interval,
            entry_log_file_bytes=self.entry_log_file_bytes,
            compaction=self.compaction_policy(),
        )


__all__ = ["BookieConfig", "parse_listen"]
