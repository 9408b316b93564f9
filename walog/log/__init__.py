"""The log layer: logs made of ledgers (docs/protocol.md, "Logs").

- ``position``      Position, Record, Segment
- ``records``       how records are packed into entries (entry format, version 1)
- ``log_metadata``  the log's metadata record (ledger list, cursors, marks) and CAS helpers
- ``ledgers``       what the log layer needs from the ledger layer (structural types)
- ``takeover``      taking a log over: fencing and recovering its tail, creating its ledgers,
                    discarding a new ledger no list can name
- ``writer``        the log writer: record batching, rolling
- ``retire``        closing the ledgers the writer rolled away from (by recovery where a
                    close fails)
- ``reader``        the non-fencing tailing reader; ``archived``: reading the archive
- ``retention``     RollPolicy, RetentionPolicy and the pure decisions made from them
- ``truncation``    truncation, retention and orphan collection (the I/O)
- ``sink``          linking ledgers written elsewhere into a log exactly once (Spark sink)
- ``async_log``     AsyncLog and the functions on logs; ``sync``: the Log / LogWriter /
                    LogReader facades

The public names are re-exported by ``walog``; modules here may change.
"""
