"""The bookie: walog's storage server (``python -m bookie``).

Three rooms, each allowed to touch less than the one above it:

- the process (this package's top modules): ``main`` (flags, start and shutdown),
  ``config`` (``BookieConfig``), ``cookie`` (refusing a wiped or foreign disk),
  ``registration`` (the bookie's record in the metadata store), ``gc`` (collecting deleted
  ledgers), ``disks`` (read-only on full disks), ``space`` (GC and compaction at once on a
  disk under pressure), ``metrics`` and ``metric_parts``
  (Prometheus), ``notices`` (one-line warnings), ``log_output`` (log lines) and
  ``exit_with`` (stopping with another process);
- :mod:`bookie.server`: the front ends that answer clients (the gRPC port, the native port,
  the add stream, admission accounting, TLS and tokens, the HTTP port and health);
- :mod:`bookie.storage`: the storage engine (journal, write cache, entry logs, index,
  checkpoints, replay, compaction), the only room that touches the data directories.

Storage imports neither of the others; the front ends reach it only through its engine
(``bookie.storage.engine``). Import contracts in pyproject.toml hold both.
"""
