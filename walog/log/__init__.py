"""The log layer: logs made of ledgers (seed 000, "Ledgers to logs").

- ``position``   Position, Record, Segment
- ``records``    how records are packed into entries (entry format, version 1)
- ``metadata``   the log's metadata record (ledger list, cursors, marks) and CAS helpers
- ``writer``     takeover, record batching, rolling
- ``reader``     the non-fencing tailing reader
- ``retention``  RollPolicy, RetentionPolicy and the pure decisions made from them
- ``truncation`` truncation, retention and orphan collection (the I/O)
- ``log``        AsyncLog; ``sync``: the Log / LogWriter / LogReader facades
- ``quickstart`` the guided tour behind ``walog quickstart``

The public names are re-exported by ``walog``; modules here may change.
"""
