"""The wire: what both ends of the bookie protocol share.

Clients (:mod:`walog.transport`) and bookies (:mod:`bookie`) speak the same protocol; this
package holds everything they must agree on and nothing else:

- :mod:`walog.wire.proto`: the ``.proto`` file and its generated messages and gRPC stubs;
- :mod:`walog.wire.frames`: the framing of the native port;
- :mod:`walog.wire.packing`: the packed entry format of adds (also what bookies journal);
- :mod:`walog.wire.digest`: entry digests and master keys;
- :mod:`walog.wire.status`: the bookie's answer codes;
- :mod:`walog.wire.durability`: a ledger's durability level;
- :mod:`walog.wire.limits`: message and entry size limits;
- :mod:`walog.wire.keepalive`: TCP keepalive settings of both ends' connections.

It imports nothing else of walog, so either end can change above it without touching the
other (the layering test in tests/unit/test_layering.py holds this).
"""
