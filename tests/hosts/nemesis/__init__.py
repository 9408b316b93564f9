"""A long mixed-fault run across hosts, with a history checker (see docs/correctness.md,
"the mixed run across hosts").

- ``schedule``  the seeded fault schedule and its bound (pure)
- ``services``  the processes on the client hosts: writers, key-value nodes and client,
  tailing reader, autorecovery, maintain, decommission
- ``faults``    carrying the schedule out on a HostCluster, and the heal at the end
- ``survey``    which bookies hold every fragment's entries
- ``run``       one run: setup, nemesis, heal, checks, totals
- ``tail``, ``kvclient``  the tailing reader and the key-value client (processes)
- ``__main__``  ``python -m tests.hosts.nemesis --minutes N --seed S``
"""
