"""A real standalone ZooKeeper server for tests (Debian's jars in /usr/share/java).

``ZooKeeperServer`` starts ``org.apache.zookeeper.server.ZooKeeperServerMain`` on a free
loopback port with a temporary data dir and a 500 ms tick (so sessions may be as short as
1 s), and waits until it answers ``ruok``. The server dies with the thread that started it
(:data:`tests.processes.DIE_WITH_PARENT`), so a test run killed with SIGKILL leaves no
ZooKeeper running.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from types import TracebackType

from tests.processes import DIE_WITH_PARENT
from walog.testing.tempdirs import owned_temp_dir
from walog.testing.zookeeper import ZooKeeperError, classpath

TICK_MS = 500

ZooKeeperUnavailable = ZooKeeperError
"""Java or the ZooKeeper jars are missing, or the server did not come up."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command and return the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """A standalone ZooKeeper on 127.0.0.1; use as a context manager or start()/stop()."""

    def __init__(
        self,
        *,
        start_timeout: float = 30.0,
        extra_config: str = "",
        jvm_flags: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.start_timeout = start_timeout
        self.extra_config = extra_config
        """Lines appended to zoo.cfg (keys it does not know become ``zookeeper.*``
        system properties, e.g. ``ssl.keyStore.location``)."""
        self.jvm_flags = jvm_flags
        """Extra JVM options, e.g. ``-Djava.security.auth.login.config=JAAS``."""
        self._dir = owned_temp_dir("walog-zk-")  # a killed run's are removed by the next
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self._dir / "server.log"

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:PORT`` for kazoo."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server process's PID (once started)."""
        assert self._proc is not None, "server not started"
        return self._proc.pid

    def uri(self, chroot: str = "/walog", **options: float) -> str:
        """A ``zk://`` metadata URI for ``chroot``, with optional query options."""
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"zk://{self.connect_string}{chroot}" + (f"?{query}" if query else "")

    def start(self) -> ZooKeeperServer:
        """Start the server and wait until it answers ``ruok``."""
        path = classpath()  # names what is missing: java or the jars
        cfg = self._dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={TICK_MS}\n"
            f"minSessionTimeout={2 * TICK_MS}\n"
            f"maxSessionTimeout={60 * TICK_MS}\n"
            f"dataDir={self._dir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "maxClientCnxns=0\n" + self.extra_config
        )
        cmd = [*DIE_WITH_PARENT, "java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", path]
        cmd += ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", *self.jvm_flags]
        cmd += ["org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)]
        with self._log.open("wb") as out:
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:  # waiting for an external process to listen
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(OSError):
                if four_letter_word(self.port, "ruok") == "imok":
                    return self
            time.sleep(0.05)
        log_tail = self._log.read_text(errors="replace")[-2000:]
        self.stop()
        raise ZooKeeperUnavailable(f"ZooKeeper did not start on port {self.port}:\n{log_tail}")

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): clients see a silent, unresponsive peer."""
        assert self._proc is not None, "server not started"
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT)."""
        assert self._proc is not None, "server not started"
        self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server and remove its data."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
