"""A standalone Spark master and workers on loopback, launched from the pyspark installation."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import pyspark

from tests.spark.conftest import spark_env

PYSPARK_HOME = Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneSpark:
    """``with StandaloneSpark(tmp) as spark_cluster: spark_cluster.master_url``.

    Each of ``workers`` workers (separate JVMs) gets one core and 1 GiB; their executors
    run the venv's Python with this checkout importable (``spark_env``).
    """

    def __init__(self, work_dir: Path, start_timeout: float = 90.0, workers: int = 1) -> None:
        self.work_dir = work_dir
        self.workers = workers
        self.start_timeout = start_timeout
        self.port = _free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        """Environment for the daemons and for a driver talking to them."""
        return {
            **os.environ,
            **spark_env(),
            "SPARK_HOME": str(PYSPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            # Names the jars layout of a release; without it the launcher looks for a build.
            "SPARK_SCALA_VERSION": "2.13",
        }

    def _launch(self, name: str, main: str, *args: str) -> Path:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java is not installed; a standalone Spark cluster needs it")
        log = self.work_dir / f"{name}.log"
        with log.open("wb") as out:
            cmd = [java, "-Xmx512m", "-cp", f"{PYSPARK_HOME / 'jars'}/*", main, *args]
            self._procs.append(
                subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env())
            )
        return log

    def _wait_for(self, log: Path, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + self.start_timeout
        while log.read_text(errors="replace").count(text) < count:
            if any(p.poll() is not None for p in self._procs):
                raise RuntimeError(f"a Spark daemon exited; see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{text!r} did not appear in {log} in {self.start_timeout}s")
            time.sleep(0.2)  # polling a log file: there is no event to await

    def __enter__(self) -> StandaloneSpark:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            master = self._launch(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0",
            )  # fmt: skip
            # Workers retry until the master listens: start every JVM at once.
            for i in range(self.workers):
                self._launch(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                    "--webui-port", "0", "--work-dir", str(self.work_dir / f"work-{i}"),
                )  # fmt: skip
            self._wait_for(master, "Registering worker", count=self.workers)
        except BaseException:
            self.close()
            raise
        return self

    def executor_pids(self) -> list[int]:
        """Process ids of the executor JVMs the workers run now."""
        workers = {p.pid for p in self._procs[1:]}
        found: list[int] = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue  # exited meanwhile
            if int(fields[1]) in workers and b"CoarseGrainedExecutorBackend" in cmdline:
                found.append(int(stat.parent.name))
        return found

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker, then the master."""
        for proc in reversed(self._procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
