"""A userspace delaying proxy: latency between hosts on a kernel without ``netem``.

``python -m walog.testing.delay_proxy --port N --delay-ms D --mark M`` runs on a host
(:meth:`walog.testing.HostCluster.delay` starts it and adds the nftables rule that sends it
every TCP connection the host opens to another host). It accepts the redirected
connection, finds where it was going (``SO_ORIGINAL_DST``), connects there itself (its own
sockets carry firewall mark ``M``, which the rule lets through) and copies both ways,
handing each chunk on ``D`` milliseconds after it arrived, in order. A connection through
it therefore takes ``D`` more each way: a request and its answer ``2 D`` more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import subprocess
import time

from walog.testing.netns import Host, HostNetworkError

_SO_ORIGINAL_DST = 80
_SO_MARK = 36


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """Where a connection redirected by nftables was going (IPv4)."""
    raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
    port = struct.unpack("!H", raw[2:4])[0]
    return socket.inet_ntoa(raw[4:8]), port


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay_s`` after it arrived, in order."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # the latency being simulated
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(65536)
            queue.put_nowait((time.monotonic() + delay_s, data))
            if not data:
                break
        await sender
    finally:
        sender.cancel()


async def _serve_connection(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    delay_s: float,
    mark: int,
) -> None:
    try:
        host, port = original_destination(client_writer.get_extra_info("socket"))
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, _SO_MARK, mark)
        upstream.setblocking(False)
        await asyncio.get_running_loop().sock_connect(upstream, (host, port))
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server_reader, server_writer = await asyncio.open_connection(sock=upstream)
    except OSError:
        client_writer.close()
        return
    try:
        await asyncio.gather(
            _pump(client_reader, server_writer, delay_s),
            _pump(server_reader, client_writer, delay_s),
        )
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        client_writer.close()
        server_writer.close()


async def serve(port: int, delay_s: float, mark: int) -> None:
    """Accept redirected connections on ``port`` until cancelled."""
    server = await asyncio.start_server(
        lambda r, w: _serve_connection(r, w, delay_s, mark), "0.0.0.0", port
    )
    print(f"delay proxy on port {port}, {delay_s * 1000:g} ms each way", flush=True)
    async with server:
        await server.serve_forever()


PROXY_PORT = 3999
"""The port the proxy listens on, on its host."""
PROXY_MARK = 0x77
"""The firewall mark of the proxy's own connections (the redirect lets them through)."""


def start_proxy(host: Host, delay_ms: float) -> subprocess.Popen[bytes]:
    """Start a delaying proxy on ``host`` and wait until it listens (the redirect to it is
    the caller's: :meth:`HostNetwork.redirect_outgoing`).

    Raises:
        ValueError: ``delay_ms`` is not positive.
        HostNetworkError: the proxy did not start.
    """
    if delay_ms <= 0:
        raise ValueError(f"the delay must be > 0 ms, got {delay_ms}")
    proxy = host.popen(
        ["python", "-m", "walog.testing.delay_proxy", "--port", str(PROXY_PORT),
         "--delay-ms", str(delay_ms), "--mark", str(PROXY_MARK)],
        log=subprocess.PIPE,
    )  # fmt: skip
    assert proxy.stdout is not None
    output = b""
    # Its first line says it listens; a warning of the interpreter may come first.
    while line := proxy.stdout.readline():
        if line.startswith(b"delay proxy on port"):
            return proxy
        output += line
    proxy.kill()
    proxy.wait()
    raise HostNetworkError(
        f"the delaying proxy on {host.name} did not start: {output.decode()[-500:]}"
    )


def main() -> None:
    """Parse the command line and serve."""
    parser = argparse.ArgumentParser(prog="python -m walog.testing.delay_proxy")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--mark", type=int, required=True)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.delay_ms / 1000.0, args.mark))


if __name__ == "__main__":
    main()
