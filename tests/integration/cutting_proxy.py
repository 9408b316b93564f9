"""A TCP proxy that can lose the answer to one request (it forwards the request, drops the
client's connection before the reply, and refuses new connections for a while), or damage
answers in transit.

Used in front of a real ZooKeeper to make a compare-and-swap whose outcome the client cannot
know: the server applies it, the client sees a connection loss and, once the refusal ends,
reconnects to a server that already holds its change. In front of a bookie, it flips a bit
of every answer that carries a given payload, as a faulty link or NIC would.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType

ZK_SET_DATA = 5
"""The opcode of ZooKeeper's setData request."""


def zk_set_data_request(path: str) -> bytes:
    """The bytes of a setData request's header tail: opcode then the length-prefixed path."""
    raw = path.encode()
    return struct.pack(">ii", ZK_SET_DATA, len(raw)) + raw


class CuttingProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; see :meth:`lose_answer_to`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pattern: tuple[bytes, ...] | None = None
        self._refuse_s = 0.0
        self._refuse_until = 0.0
        self._damage: bytes | None = None
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self.cut = threading.Event()
        """Set once a request matching the armed pattern went through and its answer was lost."""
        threading.Thread(target=self._accept, daemon=True, name="cutting-proxy").start()

    def lose_answer_to(self, pattern: bytes, refuse_s: float, *also: bytes) -> None:
        """Arm: the next client chunk containing ``pattern`` (and each of ``also``) reaches
        the server, its client connection is dropped before any reply, and connections are
        refused ``refuse_s``."""
        with self._lock:
            self._pattern, self._refuse_s = (pattern, *also), refuse_s
            self.cut.clear()

    def cut_off(self, seconds: float) -> None:
        """Drop every connection now and refuse new ones for ``seconds``: the client loses
        the server at once, while a ZooKeeper server keeps the client's session for the
        session's own timeout."""
        self._refuse_until = time.monotonic() + seconds
        with self._lock:
            open_now = list(self._sockets)
        for sock in open_now:
            self._drop(sock)

    def damage_answers(self, pattern: bytes | None) -> None:
        """Flip one bit of ``pattern`` in every answer chunk that carries it (None: stop)."""
        with self._lock:
            self._damage = pattern

    def _damaged(self, chunk: bytes) -> bytes:
        pattern = self._damage
        at = chunk.find(pattern) if pattern else -1
        if at < 0:
            return chunk
        return chunk[:at] + bytes([chunk[at] ^ 0x01]) + chunk[at + 1 :]

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._refuse_until:
                client.close()
                continue
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, server}
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if from_client and self._matches(chunk):
                    # The client's side goes first, so no reply can reach it; then the
                    # request goes on to the server, whose side stays open a moment so that
                    # it handles the request fully.
                    self._refuse_until = time.monotonic() + self._refuse_s
                    self._drop(src)
                    dst.sendall(chunk)
                    time.sleep(0.5)
                    self.cut.set()
                    break
                dst.sendall(chunk if from_client else self._damaged(chunk))
        except OSError:
            pass
        finally:
            self._drop(src)
            self._drop(dst)

    def _matches(self, chunk: bytes) -> bool:
        with self._lock:
            if self._pattern is None or not all(p in chunk for p in self._pattern):
                return False
            self._pattern = None
            return True

    def _drop(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
        with self._lock:
            self._sockets.discard(sock)

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed = True
        self._listener.close()
        for sock in list(self._sockets):
            self._drop(sock)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
