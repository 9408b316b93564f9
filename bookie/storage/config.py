"""The storage engine's settings: :class:`StorageConfig`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bookie.storage.compaction import CompactionPolicy
from walog.settings import setting
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES

_MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class StorageConfig:
    """Where and how a bookie stores entries (the storage engine's settings).

    Each field's default and help text are declared here once (:func:`walog.settings.setting`);
    the bookie's flags take over those it has (``BookieConfig``).

    Group commit (``group_wait_s``, ``group_max_bytes``): with no wait, a group is written
    and synced as soon as the journal thread is free, and the records that arrive during
    that write and sync form the next group: the batching comes from the sync itself.

    Entry-log pages (``cache_entry_logs``): checkpointed entries are read rarely (tailers
    read recent entries from the write cache), and caching every byte written would only
    crowd out pages that are read; on hosts where new page-cache pages are costly to get
    (virtual machines that hand freed memory back), dropping them lets the next checkpoint
    reuse the same memory.
    """

    data_dir: Path = setting(
        help="the data directory: entry logs (entrylogs/), the index (index/, LMDB) and the "
        "bookie's cookie"
    )
    journal_dir: Path | None = setting(
        None,
        help="the journal's directory, ideally on a disk of its own (journal syncs are on "
        "the write path)",
    )
    group_wait_s: float = setting(
        0.0,
        help="longest wait of a journal group that must be synced for more records, from "
        "its first record's arrival; 0: none",
    )
    group_max_bytes: int = setting(512 * 1024, help="a journal group commits at this size")
    journal_file_bytes: int = setting(64 * _MIB, help="a journal file rolls over at this size")
    entry_log_file_bytes: int = setting(
        512 * _MIB,
        help="an entry log rolls over at this size; the log being filled is never "
        "compacted, so smaller logs give space back sooner",
    )
    write_cache_bytes: int = setting(
        64 * _MIB,
        help="entries received since the last checkpoint stay in memory; a checkpoint "
        "starts early once they take this many bytes",
    )
    checkpoint_interval_s: float = setting(
        10.0,
        help="time between checkpoints (the write cache to the entry logs and the index, "
        "then older journal files are deleted), give or take a tenth; a failed checkpoint "
        "is retried after this long",
    )
    volatile_flush_interval_s: float = setting(
        1.0, help="time (>= 1 s) before the journal syncs entries of VOLATILE ledgers"
    )
    max_entry_bytes: int = setting(
        DEFAULT_MAX_ENTRY_BYTES,
        help="adds with a larger payload are refused with ENTRY_TOO_LARGE; announced in the "
        "bookie's registration, where a log's writer checks its own limit at open",
    )
    cache_entry_logs: bool = setting(
        False,
        help="keep the entry-log pages a checkpoint wrote in the page cache; by default they "
        "are dropped once synced (POSIX_FADV_DONTNEED)",
    )
    compaction: CompactionPolicy = dataclasses.field(default_factory=CompactionPolicy)
    """When partly dead entry logs are compacted, and how fast (bookie/storage/compaction.py)."""

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
