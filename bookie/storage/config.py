"""The storage engine's settings: :class:`StorageConfig`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bookie.storage.compaction import CompactionPolicy
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES

_MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class StorageConfig:
    """Where and how a bookie stores entries (the storage engine's settings).

    Attributes:
        data_dir: Root of the stored state: ``entrylogs/`` (entry logs) and ``index/``
            (LMDB: entry locations, ledger state, checkpoint mark).
        journal_dir: Journal files; ``data_dir / "journal"`` when None. Put it on its own
            disk to keep journal syncs free of entry-log traffic.
        group_wait_s: A journal group that must be synced waits up to this long for more
            records (counted from its first record's arrival) ... 0: it is written and
            synced as soon as the journal thread is free; records that arrive during that
            write and sync form the next group (the batching comes from the sync itself).
        group_max_bytes: ... or once it holds this many bytes.
        journal_file_bytes: A journal file is rolled over once it grows past this size.
        entry_log_file_bytes: An entry log is rolled over once it grows past this size.
        write_cache_bytes: Entries received since the last checkpoint stay in memory; a
            checkpoint starts early once they take this many bytes.
        checkpoint_interval_s: Time between checkpoints (write cache to entry logs + index,
            then the journal mark moves forward and older journal files are deleted), give
            or take a tenth; the first falls in the second half of the first interval.
        volatile_flush_interval_s: Entries of VOLATILE ledgers written but not synced are
            synced by the journal after at most this long (>= 1 s).
        max_entry_bytes: Adds with a larger payload are refused with BAD_REQUEST.
        compaction: When partly dead entry logs are compacted, and how fast
            (bookie/storage/compaction.py).
        cache_entry_logs: Keep the entry-log pages a checkpoint wrote in the page cache.
            False (the default): once they are synced, the bookie tells the kernel it will
            not need them soon (``POSIX_FADV_DONTNEED``). Checkpointed entries are read
            rarely (tailers read recent entries from the write cache), and caching every
            byte written would only crowd out pages that are read; on hosts where new
            page-cache pages are costly to get (virtual machines that hand freed memory
            back), dropping them lets the next checkpoint reuse the same memory.
    """

    data_dir: Path
    journal_dir: Path | None = None
    group_wait_s: float = 0.0
    group_max_bytes: int = 512 * 1024
    journal_file_bytes: int = 64 * _MIB
    entry_log_file_bytes: int = 512 * _MIB
    write_cache_bytes: int = 64 * _MIB
    checkpoint_interval_s: float = 10.0
    volatile_flush_interval_s: float = 1.0
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES + 1024
    cache_entry_logs: bool = False
    compaction: CompactionPolicy = dataclasses.field(default_factory=CompactionPolicy)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.journal_dir is not None:
            object.__setattr__(self, "journal_dir", Path(self.journal_dir))
        if self.group_wait_s < 0:
            raise ValueError(f"StorageConfig.group_wait_s must be >= 0, got {self.group_wait_s}")
        if self.checkpoint_interval_s <= 0:
            raise ValueError(
                "StorageConfig.checkpoint_interval_s must be > 0 seconds, "
                f"got {self.checkpoint_interval_s}"
            )
        if self.volatile_flush_interval_s < 1.0:
            raise ValueError(
                "StorageConfig.volatile_flush_interval_s must be >= 1 second, "
                f"got {self.volatile_flush_interval_s}"
            )
        for name in (
            "group_max_bytes",
            "journal_file_bytes",
            "entry_log_file_bytes",
            "write_cache_bytes",
            "max_entry_bytes",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"StorageConfig.{name} must be > 0, got {value}")

    @property
    def journal_path(self) -> Path:
        """The journal directory actually used."""
        return self.journal_dir if self.journal_dir is not None else self.data_dir / "journal"


__all__ = ["StorageConfig"]
