"""``walog archive LOG --to DIR``: the command around :func:`walog.spark.archive.archive_log`.

It starts a Spark session of its own (:mod:`walog.spark.session`: Spark's log goes to a
file), archives the log and says where the archive now ends as ``walog log show`` does: the
first record not archived, at a position that exists.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from walog.errors import WalogError
from walog.spark.archive import archive_log
from walog.spark.options import BookieAccess
from walog.spark.session import spark_log_path, spark_session


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``walog archive``."""
    from walog.cli.options import CommandParser, add_connection_options

    parser = CommandParser(
        prog="walog archive",
        description="Archive the closed, not yet archived ledgers of a log to Parquet "
        "(DIR/ledger=<id>/...) with Spark, then mark them archived.",
    )
    parser.add_argument("log", help="log name")
    add_connection_options(parser)
    parser.add_argument("--to", required=True, metavar="DIR", help="archive root directory")
    parser.add_argument(
        "--master", default="local[*]", metavar="URL", help="Spark master [local[*]]"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.epilog = (
        f"Spark's own log goes to a file, never to the terminal: {spark_log_path('walog-archive')}"
        " (set WALOG_SPARK_LOG to choose it); errors name it."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``walog archive LOG --metadata URI --to DIR [--master URL]``; returns the exit
    status (0 done, 1 failed, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.metadata:
        parser.error("--metadata URI is required (or set WALOG_METADATA)")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    paths = (args.tls_ca, args.tls_cert, args.tls_key, args.auth_token_file)
    access = BookieAccess(*(None if p is None else str(p) for p in paths))
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    try:
        spark = spark_session(args.master, "walog-archive")
        try:
            result = archive_log(
                spark,
                args.metadata,
                args.log,
                args.to,
                progress=False if args.no_progress else None,
                timeout=args.timeout,
                access=access,
            )
        finally:
            spark.stop()
    except (WalogError, ValueError, OSError, PySparkException, Py4JError) as exc:
        # Spark's messages carry a JVM stack trace: its first line says what failed.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = spark_log_path("walog-archive")
        print(
            f"walog: error: {type(exc).__name__}: {first} (Spark's log: {where})", file=sys.stderr
        )
        return 1
    before = result.archived_before
    if args.json:
        doc = {
            "log": args.log,
            "ledgers": list(result.ledger_ids),
            "rows": result.rows,
            "resumed": result.resumed,
            "archived_before": None if before is None else str(before),
        }
        print(json.dumps(doc))
        return 0
    # As `walog log show` says it: the first record not archived, a position that exists.
    up_to = "nothing archived yet" if before is None else f"archived up to {before} (not included)"
    if not result.ledger_ids:
        print(f"nothing to archive; {up_to}")
    else:
        rows = "" if result.rows is None else f", {result.rows} records"
        resumed = " (finished an earlier run)" if result.resumed else ""
        print(f"archived ledgers {', '.join(map(str, result.ledger_ids))}{rows}{resumed}; {up_to}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["build_parser", "main"]
