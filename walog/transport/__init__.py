"""Connections from clients to bookies: the native port or gRPC (the simulator has its own).

- ``base``: the interface the ledger protocol talks through (``BookieClient``,
  ``BookiePool``);
- ``network``: the connections, one batched add stream per bookie; ``route``: which port
  carries a bookie's calls; ``native``: the client end of the native port;
- ``add_stream``: one ``Add`` stream; ``codec``: frames, status codes, digest checks and the
  one translation of ``grpc.RpcError``;
- ``credentials``: TLS and bearer tokens.
"""
