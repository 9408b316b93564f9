"""The bookie's front ends: everything that answers a client, over one storage engine.

- ``service``: the bookie's calls (reads, fences, LAC, info) over the engine;
  ``add_stream``: the add stream both ports serve;
- ``grpc_port``: the gRPC server; ``native_port``: the native frame protocol;
- ``security``: TLS and bearer tokens; ``admission``: in-flight bytes and counters;
- ``http``: the metrics and health port; ``health``: what health reports.

The front ends reach the storage only through its engine (:mod:`bookie.storage`).
"""
