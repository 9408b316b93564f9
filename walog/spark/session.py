"""The Spark sessions the ``walog`` commands start (``walog archive``, ``maintain``, the
Spark benchmarks): their Python workers run walog, and Spark's own output goes to a file.

The JVM logs through log4j2 and writes a few lines straight to its stderr before log4j2
starts; neither belongs on the terminal of someone who ran ``walog archive``. The session
is started with a log4j2 configuration that writes every line, WARN and up, to
:func:`spark_log_path` and with the JVM's stderr pointed at the same file. An application
that starts its own session keeps its own logging: this module is for the commands.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENV_SPARK_LOG = "WALOG_SPARK_LOG"
"""Where the commands' Spark sessions write their log (default: :func:`spark_log_path`)."""

_LOG4J2 = """\
status = error
rootLogger.level = warn
rootLogger.appenderRef.file.ref = walog
appender.file.type = File
appender.file.name = walog
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
"""


def spark_log_path(app_name: str) -> Path:
    """The file a command's Spark session logs to: ``$WALOG_SPARK_LOG``, else
    ``TMPDIR/walog-spark-USER/APP.log``."""
    chosen = os.environ.get(ENV_SPARK_LOG)
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / f"walog-spark-{getpass.getuser()}" / f"{app_name}.log"


def prepare_environment() -> None:
    """Let the Python workers of sessions made from now on run walog.

    Unless the environment says otherwise, workers run this interpreter, and the directory
    walog is imported from is put on their ``PYTHONPATH`` (a no-op when walog is installed
    in site-packages; needed when it runs from a checkout).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    home = str(Path(__file__).resolve().parents[2])  # the directory holding walog
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if home not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([home, *paths])


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point this process's stderr (file descriptor 2) at ``path`` meanwhile: a JVM
    started meanwhile keeps it as its own stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def spark_session(master: str, app_name: str) -> SparkSession:
    """A Spark session whose Python workers can run walog (:func:`prepare_environment`)
    and whose log goes to :func:`spark_log_path` (created with its directory), never to
    this process's terminal."""
    prepare_environment()
    from pyspark.sql import SparkSession

    log = spark_log_path(app_name)
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = log.parent / f"{app_name}-log4j2.properties"
    config.write_text(_LOG4J2.format(path=log))
    with _stderr_to(log):
        return (
            SparkSession.builder.master(master)
            .appName(app_name)
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{config}")
            .getOrCreate()
        )


__all__ = ["ENV_SPARK_LOG", "prepare_environment", "spark_log_path", "spark_session"]
