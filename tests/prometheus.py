"""A real Prometheus for tests (Debian's ``prometheus``), scraping targets the test names.

:class:`PrometheusServer` writes a config with a 1 s scrape and rule-evaluation interval,
starts ``prometheus`` on a free loopback port with its data in a temporary directory, waits
until ``/-/ready`` answers, and queries its HTTP API. The server dies with the thread that
started it (:data:`tests.processes.DIE_WITH_PARENT`), and directories of runs whose process
is gone are removed at the next start, so a test run killed with SIGKILL leaves nothing
behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.processes import DIE_WITH_PARENT
from walog.testing import free_port
from walog.testing.tempdirs import owned_temp_dir

PREFIX = "walog-prometheus-"
INTERVAL_S = 1


class PrometheusUnavailable(RuntimeError):
    """The ``prometheus`` binary is missing or the server did not come up."""


class PrometheusServer:
    """Prometheus scraping ``targets`` (job name -> ``HOST:PORT`` list) every second.

    Args:
        targets: what to scrape, by job name.
        rule_files: alerting/recording rule files to load.
        start_timeout: seconds the server may take to become ready.
    """

    def __init__(
        self,
        targets: Mapping[str, Sequence[str]],
        *,
        rule_files: Sequence[Path] = (),
        start_timeout: float = 60.0,
    ) -> None:
        self.targets = {job: list(addresses) for job, addresses in targets.items()}
        self.rule_files = list(rule_files)
        self.start_timeout = start_timeout
        self.port = free_port()
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server process's PID (once started)."""
        assert self._proc is not None, "server not started"
        return self._proc.pid

    def _config(self) -> str:
        # JSON is YAML: no YAML library needed to write the config.
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": f"{INTERVAL_S}s",
                "scrape_timeout": f"{INTERVAL_S}s",
                "evaluation_interval": f"{INTERVAL_S}s",
            },
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": addresses}]}
                for job, addresses in self.targets.items()
            ],
        }
        return json.dumps(config, indent=2)

    def start(self) -> PrometheusServer:
        """Start the server and wait until it is ready."""
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusUnavailable(
                "prometheus is not installed: `apt-get install -y prometheus` "
                "(the ./test script does this)"
            )
        self._dir = owned_temp_dir(PREFIX)
        config = self._dir / "prometheus.yml"
        config.write_text(self._config())
        log = self._dir / "prometheus.log"
        cmd = [
            *DIE_WITH_PARENT,
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self._dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with log.open("wb") as out:
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:  # waiting for an external process to listen
            if self._proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        tail = log.read_text(errors="replace")[-2000:]
        self.stop()
        raise PrometheusUnavailable(f"Prometheus did not start on port {self.port}:\n{tail}")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query (``metric`` labels and ``value`` pairs)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.load(reply)
        if body.get("status") != "success":
            raise AssertionError(f"query {promql!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def values(self, promql: str) -> dict[str, float]:
        """The query's samples as ``{labels as text: value}`` (``__name__`` left out)."""
        out = {}
        for sample in self.query(promql):
            metric = sorted(sample["metric"].items())
            labels = ",".join(f"{k}={v}" for k, v in metric if k != "__name__")
            out[labels] = float(sample["value"][1])
        return out

    def wait_for(self, promql: str, expected: Mapping[str, float], timeout: float = 30.0) -> None:
        """Wait until the query answers exactly ``expected`` (scrapes come every second).

        Raises:
            AssertionError: after ``timeout`` seconds, with the last answer.
        """
        deadline = time.monotonic() + timeout
        seen: dict[str, float] = {}
        while time.monotonic() < deadline:  # Prometheus has no push: ask until it knows
            seen = self.values(promql)
            if seen == dict(expected):
                return
            time.sleep(0.25)
        raise AssertionError(f"{promql!r} is {seen}, not {dict(expected)}, after {timeout:g}s")

    def stop(self) -> None:
        """Stop the server and remove its data."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
