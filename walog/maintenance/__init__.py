"""``walog maintain``: the service that keeps every log to its stored settings.

- ``service``: one pass over every log (retention, orphan collection, the archive job) and
  the loop that repeats it;
- ``metrics``: the Prometheus metrics of the passes, per log;
- ``command``: the ``walog maintain`` program (flags, ``--config`` file, ``--once``).
"""
