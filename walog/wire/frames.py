"""Pure rules of the native bookie protocol: the same protobuf messages as the gRPC service,
carried as length-prefixed frames over one TCP (or TLS) connection per client and bookie.

gRPC in Python pays a few hundred microseconds of CPU per message on each side (HTTP/2
framing, the completion-queue thread and its hand-offs of the GIL); an asyncio protocol that
reads and writes whole frames pays a few tens. The bookie serves both; clients that learn
the native port (``InfoResponse.native_port``) use it, the others use gRPC.

A frame is a 10-byte header, then its body::

    length:uint32  call_id:uint32  kind:uint8  method:uint8   (big-endian)

``length`` counts the body only. The first frame each way is ``HELLO``: the client's body is
:data:`HELLO_MAGIC` followed by its bearer token (may be empty); the bookie answers with a
``HELLO`` whose body is an :class:`Code` byte and a reason, and closes the connection unless
the code is ``OK``. A bookie speaks every protocol version up to its own
(:data:`NATIVE_VERSION`); a HELLO of a newer one is answered ``UNIMPLEMENTED`` with a reason
naming both versions. After that the client numbers its calls from 1 up, each id greater than
the last one (a late frame of a finished call then starts nothing):

* ``DATA``: one message of a call. The client's first ``DATA`` of an id starts a call of
  ``method`` (the byte is ignored afterwards); the bookie's carry the answers.
* ``END`` from the client: it sends no more messages on the call (half-close).
  ``END`` from the bookie: the call is over; the body is a :class:`Code` byte and a reason.
* ``CANCEL`` from the client: drop the call; the bookie sends nothing more on it.

Protocol answers stay statuses inside the messages, as on gRPC; the codes here are for the
transport only.
"""

from __future__ import annotations

import enum
import struct

HEADER = struct.Struct("!IIBB")
"""length, call id, kind, method."""
MAX_BODY_BYTES = 64 * 1024 * 1024 + 4096
"""The largest frame body either side accepts: a message under the gRPC limit, plus room."""
NATIVE_VERSION = 1
"""The native protocol's version: what this walog's clients send in their HELLO, and the
newest its bookies speak."""
HELLO_PREFIX = b"walog-native/"
HELLO_MAGIC = HELLO_PREFIX + str(NATIVE_VERSION).encode() + b"\n"
"""What a client's HELLO starts with: the protocol and its version."""


def hello_version(body: bytes) -> tuple[int, bytes] | None:
    """``(protocol version, bearer token)`` of a client's HELLO body
    (``walog-native/<version>\n<token>``), or None when it is not a walog HELLO."""
    if not body.startswith(HELLO_PREFIX):
        return None
    number, newline, token = body[len(HELLO_PREFIX) :].partition(b"\n")
    if not newline or not number.isdigit() or len(number) > 9:
        return None
    return int(number), token


class Kind(enum.IntEnum):
    """What a frame is."""

    HELLO = 1
    DATA = 2
    END = 3
    CANCEL = 4


class Method(enum.IntEnum):
    """The RPCs of the ``Bookie`` service (walog/wire/proto/bookie.proto)."""

    ADD = 1
    READ = 2
    READ_LAC = 3
    WATCH_LAC = 4
    FENCE = 5
    INFO = 6
    LIST_LEDGERS = 7
    LIST_ENTRIES = 8


RPC_NAMES: dict[Method, str] = {
    Method.ADD: "Add",
    Method.READ: "Read",
    Method.READ_LAC: "ReadLac",
    Method.WATCH_LAC: "WatchLac",
    Method.FENCE: "Fence",
    Method.INFO: "Info",
    Method.LIST_LEDGERS: "ListLedgers",
    Method.LIST_ENTRIES: "ListEntries",
}
"""Each method's RPC name in the gRPC service."""


class Code(enum.IntEnum):
    """How a call (or the handshake) ended, as far as the transport is concerned. The names
    are those of ``grpc.StatusCode``, so both transports' failures read alike."""

    OK = 0
    CANCELLED = 1
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class FrameError(Exception):
    """The peer broke the frame protocol; the connection cannot go on."""


def encode(call_id: int, kind: Kind, method: int, body: bytes = b"") -> bytes:
    """One frame."""
    return HEADER.pack(len(body), call_id, kind, method) + body


def frame_header(call_id: int, kind: Kind, method: int, body_bytes: int) -> bytes:
    """The header of a frame whose body of ``body_bytes`` is sent after it as it is (a large
    body then is never copied to join its header)."""
    return HEADER.pack(body_bytes, call_id, kind, method)


def encode_end(call_id: int, code: Code, reason: str = "") -> bytes:
    """The bookie's ``END`` of a call."""
    return encode(call_id, Kind.END, 0, encode_status(code, reason))


def encode_status(code: Code, reason: str = "") -> bytes:
    """The body of a bookie's ``HELLO`` or ``END``: the code, then the reason."""
    return bytes((code,)) + reason.encode()


def decode_status(body: bytes) -> tuple[Code, str]:
    """The code and reason of a ``HELLO`` or ``END`` body from the bookie (an unknown or
    missing code reads as ``INTERNAL``)."""
    if not body:
        return Code.INTERNAL, "empty status"
    try:
        code = Code(body[0])
    except ValueError:
        return Code.INTERNAL, f"unknown status code {body[0]}"
    return code, body[1:].decode(errors="replace")


class FrameDecoder:
    """Splits a byte stream into frames.

    Each body is copied once, out of the received chunks: a frame that arrives whole in one
    chunk is sliced from it, one that spans chunks is joined from them when its last byte
    comes (never gathered in a growing buffer first: add frames are large and mostly span
    reads).

    Args:
        max_body: the largest body accepted; a larger length is a :class:`FrameError`.
    """

    def __init__(self, max_body: int = MAX_BODY_BYTES) -> None:
        self._max_body = max_body
        # The chunks of an incomplete frame (the first starts at its header), their size,
        # and the frame's header once it is whole.
        self._chunks: list[memoryview] = []
        self._have = 0
        self._head: tuple[int, int, int, int] | None = None

    def feed(self, data: bytes) -> list[tuple[int, Kind, int, bytes]]:
        """The frames completed by ``data``: (call id, kind, method, body) each.

        Raises:
            FrameError: a frame is too large or of an unknown kind.
        """
        frames: list[tuple[int, Kind, int, bytes]] = []
        offset = 0
        if self._chunks:
            offset = self._complete(memoryview(data), frames)
            if offset < 0:
                return frames
        end = len(data)
        header = HEADER.size
        with memoryview(data) as view:
            while end - offset >= header:
                length, call_id, kind, method = self._header(data, offset)
                start = offset + header
                if end - start < length:
                    break
                frames.append((call_id, Kind(kind), method, bytes(view[start : start + length])))
                offset = start + length
        if offset < end:
            rest = memoryview(data)[offset:]
            self._chunks = [rest]
            self._have = len(rest)
            self._head = self._header(rest, 0) if len(rest) >= header else None
        return frames

    def _header(self, source: bytes | memoryview, offset: int) -> tuple[int, int, int, int]:
        length, call_id, kind, method = HEADER.unpack_from(source, offset)
        if length > self._max_body:
            raise FrameError(f"frame of {length} bytes is over the {self._max_body} limit")
        if not Kind.HELLO <= kind <= Kind.CANCEL:
            raise FrameError(f"unknown frame kind {kind}")
        return length, call_id, kind, method

    def _complete(self, data: memoryview, frames: list[tuple[int, Kind, int, bytes]]) -> int:
        """Add ``data`` to the incomplete frame; once it is whole, append it to ``frames``
        and return the offset in ``data`` after it, else -1."""
        chunks = self._chunks
        chunks.append(data)
        self._have += len(data)
        header = HEADER.size
        if self._head is None:
            if self._have < header:
                return -1
            self._head = self._header(b"".join(c[:header] for c in chunks)[:header], 0)  # rare
        length, call_id, kind, method = self._head
        if self._have < header + length:
            return -1
        used = len(data) - (self._have - header - length)  # of ``data``, for this frame
        chunks[-1] = data[:used]
        # The body's one copy, joined from the chunks past the header.
        skip = header
        parts: list[memoryview] = []
        for chunk in chunks:
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            parts.append(chunk[skip:])
            skip = 0
        frames.append((call_id, Kind(kind), method, b"".join(parts)))
        self._chunks, self._have, self._head = [], 0, None
        return used

    @property
    def buffered(self) -> int:
        """Bytes received that do not make a whole frame yet."""
        return self._have


__all__ = [
    "HEADER",
    "HELLO_MAGIC",
    "HELLO_PREFIX",
    "MAX_BODY_BYTES",
    "NATIVE_VERSION",
    "RPC_NAMES",
    "Code",
    "FrameDecoder",
    "FrameError",
    "Kind",
    "Method",
    "decode_status",
    "encode",
    "encode_end",
    "encode_status",
    "frame_header",
    "hello_version",
]
