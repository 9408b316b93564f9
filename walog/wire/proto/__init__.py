"""The bookie protocol's ``.proto`` file and the code generated from it (committed; see
docs/operations.md, "Changing the wire protocol")."""
