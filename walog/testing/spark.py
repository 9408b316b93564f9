"""A standalone Spark cluster on this machine, started from the installed pyspark.

:class:`StandaloneSpark` runs a Spark master and workers as JVMs of their own (the classes
``org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` from pyspark's ``jars``
directory: no separate Spark installation), for tests and benchmarks of the ``walog`` data
source on a real cluster rather than in local mode::

    from walog.testing import StandaloneSpark

    with StandaloneSpark(Path("/tmp/spark"), workers=2) as standalone:
        subprocess.run([sys.executable, "job.py", standalone.master_url], env=standalone.env())

Each worker listens on a loopback address of its own (``127.0.0.2``, ``127.0.0.3``, ...), so
Spark sees separate hosts: it never runs a speculative copy of a task on the host that runs
the original, and one host would get none. Executors run this interpreter with this walog
importable (:func:`spark_env`). The daemons die with the process that started them, even
after a SIGKILL (Linux's parent-death signal, set by ``setpriv``); their executors follow
their worker. Logs and work directories stay in ``work_dir``.

Needs Java and the ``spark`` extra (pyspark).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from walog.errors import WalogError
from walog.testing.process import free_port


class StandaloneSparkError(WalogError, RuntimeError):
    """Java or pyspark is missing, or a daemon did not come up (naming its log)."""


def pyspark_home() -> Path:
    """The installed pyspark's directory, which holds Spark's ``jars``."""
    try:
        import pyspark
    except ImportError as exc:
        raise StandaloneSparkError("pyspark is not installed: pip install 'walog[spark]'") from exc
    return Path(pyspark.__file__).resolve().parent


def spark_env() -> dict[str, str]:
    """Environment for Spark processes: Python workers run this interpreter and import the
    walog that this module belongs to (a checkout or an installed package)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root,
    }


class StandaloneSpark:
    """``with StandaloneSpark(work_dir, workers=2) as s:`` a master and ``workers`` workers.

    Args:
        work_dir: logs (``master.log``, ``worker-<n>.log``) and the workers' directories.
        start_timeout: seconds for every worker to register with the master.
        workers: worker JVMs, each with ``cores`` cores and 1 GiB for executors.
        cores: cores each worker offers (one executor per worker and application).

    Attributes:
        master_url: ``spark://127.0.0.1:PORT``, for ``SparkSession.builder.master``.
        worker_hosts: each worker's address, in start order.
    """

    MASTER_HOST = "127.0.0.1"

    def __init__(
        self, work_dir: Path, start_timeout: float = 90.0, workers: int = 1, cores: int = 1
    ) -> None:
        if not 1 <= workers <= 250:
            raise ValueError(f"workers must be between 1 and 250, got {workers}")
        if cores < 1:
            raise ValueError(f"cores must be >= 1, got {cores}")
        self.work_dir = work_dir
        self.workers = workers
        self.cores = cores
        self.start_timeout = start_timeout
        self.port = free_port()
        self.master_url = f"spark://{self.MASTER_HOST}:{self.port}"
        self.worker_hosts = [f"127.0.0.{i + 2}" for i in range(workers)]
        self._procs: list[subprocess.Popen[bytes]] = []

    def env(self, host: str = MASTER_HOST) -> dict[str, str]:
        """Environment for the daemons and for a driver talking to them (on ``host``)."""
        return {
            **os.environ,
            **spark_env(),
            "SPARK_HOME": str(pyspark_home()),
            "SPARK_LOCAL_IP": host,
            # Names the jars layout of a release; without it the launcher looks for a build.
            "SPARK_SCALA_VERSION": "2.13",
        }

    def _launch(self, name: str, host: str, main: str, *args: str) -> Path:
        java = shutil.which("java")
        if java is None:
            raise StandaloneSparkError(
                "java is not installed; a standalone Spark cluster needs it "
                "(apt-get install -y openjdk-17-jre-headless)"
            )
        log = self.work_dir / f"{name}.log"
        # The parent-death signal stops a daemon whose starter died without closing it.
        prefix = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        jars = f"{pyspark_home() / 'jars'}/*"
        with log.open("wb") as out:
            cmd = [*prefix, java, "-Xmx512m", "-cp", jars, main, *args]
            self._procs.append(
                subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env(host),
                )
            )
        return log

    def _wait_for(self, log: Path, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + self.start_timeout
        while log.read_text(errors="replace").count(text) < count:
            if any(p.poll() is not None for p in self._procs):
                raise StandaloneSparkError(f"a Spark daemon exited; see {log}")
            if time.monotonic() > deadline:
                raise StandaloneSparkError(
                    f"{text!r} did not appear {count} time(s) in {log} in {self.start_timeout}s"
                )
            time.sleep(0.2)  # polling a log file: there is no event to await

    def __enter__(self) -> StandaloneSpark:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            master = self._launch(
                "master", self.MASTER_HOST,
                "org.apache.spark.deploy.master.Master",
                "--host", self.MASTER_HOST, "--port", str(self.port), "--webui-port", "0",
            )  # fmt: skip
            # Workers retry until the master listens: start every JVM at once.
            for i, host in enumerate(self.worker_hosts):
                self._launch(
                    f"worker-{i}", host,
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host", host, "--cores", str(self.cores), "--memory", "1g",
                    "--webui-port", "0", "--work-dir", str(self.work_dir / f"work-{i}"),
                )  # fmt: skip
            self._wait_for(master, "Registering worker", count=self.workers)
        except BaseException:
            self.close()
            raise
        return self

    def daemon_pids(self) -> list[int]:
        """Process ids of the master's and the workers' JVMs, master first."""
        return [p.pid for p in self._procs]

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
        """Stop the workers, then the master."""
        for proc in reversed(self._procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()


__all__ = ["StandaloneSpark", "StandaloneSparkError", "pyspark_home", "spark_env"]
