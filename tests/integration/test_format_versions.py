"""A real bookie meets a newer native protocol: it answers the HELLO with one error naming
both versions and closes the connection; a HELLO of its own version is served
(docs/compatibility.md)."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.integration.bookies import running_bookie
from walog.wire.frames import (
    HEADER,
    HELLO_MAGIC,
    NATIVE_VERSION,
    Code,
    Kind,
    decode_status,
    encode,
)
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


def _hello(port: int, body: bytes) -> tuple[Code, str]:
    """Send a HELLO with ``body``; the bookie's answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(encode(0, Kind.HELLO, 0, body))
        head = b""
        while len(head) < HEADER.size:
            chunk = conn.recv(HEADER.size - len(head))
            assert chunk, "the bookie closed the connection without answering the HELLO"
            head += chunk
        length, _, kind, _ = HEADER.unpack(head)
        assert kind == Kind.HELLO
        answer = b""
        while len(answer) < length:
            answer += conn.recv(length - len(answer))
        return decode_status(answer)


def test_a_newer_native_hello_version_is_refused_naming_both_versions(tmp_path: Path) -> None:
    with running_bookie(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db") as bookie:
        with bookie.channel() as channel:
            port = pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=30).native_port
        assert _hello(port, HELLO_MAGIC) == (Code.OK, "")
        newer = NATIVE_VERSION + 1
        code, reason = _hello(port, b"walog-native/%d\n" % newer)
    assert code is Code.UNIMPLEMENTED
    assert f"has format version {newer}; this walog reads up to {NATIVE_VERSION}" in reason
