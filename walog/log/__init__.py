"""The log layer: logs made of ledgers (docs/protocol.md, "Logs").

- ``position``      Position, Record, Segment
- ``records``       how records are packed into entries (entry formats 1 and 2: with
                    producer sessions' (producer, seq) tags)
- ``producers``     producer sessions: which (producer, seq) pairs a log holds (pure);
                    ``sessions``: the table stored with the log and rebuilt at a takeover
- ``log_metadata``  the log's metadata record (ledger list, cursors, marks) and CAS helpers
- ``log_config``    LogConfig: the settings stored with a log, and how a process's meet them
- ``damaged``       fields of a stored record that do not parse, kept aside until repaired
- ``ledgers``       what the log layer needs from the ledger layer (structural types)
- ``takeover``      taking a log over: fencing and recovering its tail, creating its ledgers,
                    discarding a new ledger no list can name
- ``writer``        the log writer: record batching, rolling; ``writer_packing``: how
                    its records fill entries
- ``entry_limit``   the log's record size limit against the client's and the bookies'
- ``retire``        closing the ledgers the writer rolled away from (by recovery where a
                    close fails)
- ``reader``        the non-fencing tailing reader; ``archived``: reading the archive;
                    ``archive_layout``: the archive's directories and columns, defined once
- ``subscriptions`` named subscriptions: names, positions given as arguments, lag (pure)
- ``registration``  a live writer's registration (host, pid, epoch, start time)
- ``lag``           how far a reader trails the log's end (ReaderLag), for warm standbys
- ``time_search``   the first record at or after a time: the search over a "read entry"
                    step (pure); ``time_seek``: it driven over bookies and the archive
- ``retention``     RollPolicy, RetentionPolicy and the pure decisions made from them
- ``truncation``    truncation, retention and orphan collection (the I/O)
- ``retention_runner``  the retention a writer applies by itself after each roll
- ``health``        a log's figures for operators (size, age, what retention waits for)
- ``sink``          linking ledgers written elsewhere into a log exactly once (Spark sink)
- ``barrier``       the read barrier: a position past every record acknowledged before
                    the call, found without fencing
- ``async_log``     AsyncLog and the functions on logs; ``sync``: the Log / LogWriter /
                    LogReader facades

The public names are re-exported by ``walog``; modules here may change.
"""
