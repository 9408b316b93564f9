"""Connections from clients to bookies: gRPC in production, in-memory in the simulator."""
