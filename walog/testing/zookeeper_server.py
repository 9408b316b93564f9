"""A single-node ZooKeeper on this host, for tests of your own against a ``zk://`` metadata
store (:class:`ZooKeeperServer`).

It runs ``org.apache.zookeeper.server.ZooKeeperServerMain`` from Debian's jars
(``apt-get install -y zookeeper``, Java 17+) on a free loopback port, with a temporary data
directory and a 500 ms tick, so sessions may be as short as 1 s. Where ``setpriv``
(util-linux) exists the server dies with the thread that started it, so a test run killed
with SIGKILL leaves no ZooKeeper behind; its data directory is removed by the next server
started on this host.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from types import TracebackType

from walog.testing.process import free_port, freeze
from walog.testing.tempdirs import owned_temp_dir
from walog.testing.zookeeper import JVM_OPTIONS, ZooKeeperError, classpath, four_letter_word

TICK_MS = 500
"""The server's tick: sessions may last from two ticks to sixty."""


class ZooKeeperServer:
    """A standalone ZooKeeper on 127.0.0.1 (not started until :meth:`start`).

    A context manager: ``with ZooKeeperServer() as zk:`` starts it and stops it, removing its
    data, on the way out::

        from walog.testing import LocalCluster, ZooKeeperServer

        with ZooKeeperServer() as zk, LocalCluster(metadata=zk.uri("/my-test")) as cluster:
            ...

    Args:
        start_timeout: seconds :meth:`start` waits for the server to answer.
        extra_config: lines appended to ``zoo.cfg`` (keys it does not know become
            ``zookeeper.*`` system properties, e.g. ``ssl.keyStore.location``).
        jvm_flags: more JVM options, e.g. ``-Djava.security.auth.login.config=JAAS``.
    """

    def __init__(
        self,
        *,
        start_timeout: float = 30.0,
        extra_config: str = "",
        jvm_flags: tuple[str, ...] = (),
    ) -> None:
        self._port = free_port()
        self.start_timeout = start_timeout
        self.extra_config = extra_config
        self.jvm_flags = jvm_flags
        self._dir = owned_temp_dir("walog-zk-")  # a killed run's are removed by the next
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self._dir / "server.log"

    @property
    def port(self) -> int:
        """Its client port on 127.0.0.1."""
        return self._port

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:PORT``, as ZooKeeper clients (kazoo) take it."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server process's PID (once started)."""
        if self._proc is None:
            raise ZooKeeperError("the ZooKeeper server was never started")
        return self._proc.pid

    def uri(self, chroot: str = "/walog", **options: float) -> str:
        """A ``zk://`` metadata URI for ``chroot``, with query options (e.g.
        ``session_timeout=4``)."""
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"zk://{self.connect_string}{chroot}" + (f"?{query}" if query else "")

    def start(self) -> ZooKeeperServer:
        """Start the server and wait until it answers ``ruok``.

        Raises:
            ZooKeeperError: Java or the jars are missing, or the server did not answer
                within ``start_timeout`` (the message holds the end of its log).
        """
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
        # Linux's parent-death signal, set by setpriv before it execs java: the server is
        # killed once the thread that started it is gone (a test run killed with SIGKILL).
        prefix = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        cmd = [*prefix, "java", "-Xmx256m", *JVM_OPTIONS, "-cp", path]
        cmd += ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", *self.jvm_flags]
        cmd += ["org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)]
        with self._log.open("wb") as out:
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:  # waiting for an external process to listen
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(OSError):
                if four_letter_word("127.0.0.1", "ruok", port=self.port) == "imok":
                    return self
            time.sleep(0.05)
        log_tail = self._log.read_text(errors="replace")[-2000:]
        self.stop()
        raise ZooKeeperError(f"ZooKeeper did not start on port {self.port}:\n{log_tail}")

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): clients see a silent, unresponsive peer.

        Raises:
            ZooKeeperError: the server is not running (a test would otherwise go on
                against whatever answers on its port).
        """
        if self._proc is not None:
            code = self._proc.poll()
            if code is not None:
                raise ZooKeeperError(f"ZooKeeper on port {self.port} exited with status {code}")
            freeze(self._proc)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after 10 s) and remove its data."""
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


__all__ = ["TICK_MS", "ZooKeeperServer"]
