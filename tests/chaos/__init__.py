"""Process chaos: real ZooKeeper, real bookie and writer processes, a seeded nemesis, and a
history checker (see docs/correctness.md, "process chaos").

- ``harness``  one run: cluster, writers, nemesis, final takeover, readers, check
- ``nemesis``  the seeded fault schedule and session expiry
- ``worker``   a writer process (takes over in turns, records acknowledgements)
- ``reader``   a reader process (whole log, or tailing during the faults)
- ``records``  record payloads and the fsynced JSON-lines files
- ``checker``  the rules, over parsed histories
- ``__main__`` ``python -m tests.chaos --minutes N --seed S``
"""
