"""The bookie's storage engine: the only room of the bookie that touches its disks.

- ``engine``: ``BookieCore``, what the front ends call (adds, fences, reads, LAC,
  checkpoints, ledger deletion), and the names they need with it: the one module of this
  room the front ends import;
- ``journal``, ``journal_files``, ``journal_records``, ``journal_writer``: the journal
  (group commit, files and framing, record payloads, the writer thread);
- ``checkpoints``: the write cache and its checkpoints (into the entry logs and index,
  the journal mark forward), on demand, when the cache fills and periodically;
- ``group_reports``: what each journal group commit tells the engine (counters, stage
  latencies, group sizes, the entries a sync made durable);
- ``lac_polls``: the LAC long polls, woken by whatever raises a ledger's LAC;
- ``write_cache``: the entries taken since the last checkpoint, held as the batches they
  came in;
- ``entry_storage``: the entry logs and index (what a checkpoint commits, reads, GC,
  compaction steps); ``entry_log_writer``: the entry log being filled and the format of
  its batch records; ``record_reads``: reading checked records out of the entry logs;
  ``log_space``: what each entry log holds live, for compaction;
- ``index``, ``run_index``, ``index_audit``, ``lmdb_check``: the index rows, the run rows'
  lookups and cuts, their audit on open, and the structural check of the LMDB file;
  ``held_ranges``: which entries of a ledger are held, as ranges (``ListEntries``), pure
  rules; ``damaged_copies``: the ledgers and entry copies found damaged since start;
- ``replay``: opening the store and replaying the journal; ``rebuild``: rebuilding a lost
  index from the entry logs (an offline command);
- ``compaction``: moving the live entries out of partly dead entry logs;
- ``ledger_state``: per-ledger state (key, fence, LAC, sync cursor), pure rules;
- ``fences``: fences waiting for their sync, and the ledgers deleted here, fenced for
  good; ``tombstones``: the set of those deleted ledgers, as stored in the index;
- ``config``: ``StorageConfig``; ``files`` and ``environment``: the disk, threads and
  journal writer the engine runs on (swapped by the simulator);
- ``fastpath`` and the ``_fast*`` extensions: the compiled hot paths and the choice of
  compiled or pure-Python code.
"""
