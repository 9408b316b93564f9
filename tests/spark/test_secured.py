"""The walog Spark source reaches bookies that require a bearer token (option
``authTokenFile``, a path each executor reads): with it a batch scan and the archive job
read every record, without it they fail naming the refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrameReader, SparkSession

import walog
from walog.spark.archive import archive_log
from walog.spark.options import BookieAccess, ReadOptions
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark


def test_options_name_files_not_secrets_and_pair_cert_with_key() -> None:
    options = ReadOptions.parse(
        {"metadata": "sqlite:///m.db", "log": "x", "authTokenFile": "/etc/walog/token"}
    )
    assert options.access == BookieAccess(auth_token_file="/etc/walog/token")
    with pytest.raises(ValueError, match="tlsCert and tlsKey go together"):
        ReadOptions.parse({"metadata": "sqlite:///m.db", "log": "x", "tlsCert": "c.pem"})
    with pytest.raises(ValueError, match="authTokenFile=/absent"):
        BookieAccess(auth_token_file="/absent").connect_kwargs()


def test_a_batch_scan_and_the_archive_job_read_from_bookies_that_require_a_token(
    spark: SparkSession, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("spark-s3cret\n")
    args = ["--auth-token-file", str(token)]
    with LocalCluster(bookies=1, data_dir=tmp_path / "c", bookie_args=args) as cluster:
        with walog.connect(cluster.metadata_uri, auth_token="spark-s3cret") as client:
            log = client.open_log("secured", ensemble_size=1, write_quorum=1, ack_quorum=1)
            with log.open_writer() as writer:
                for i in range(20):
                    writer.append(b"r%02d" % i)

        def reader() -> DataFrameReader:  # option() changes a reader in place: a new one
            return (
                spark.read.format("walog")
                .option("metadata", cluster.metadata_uri)
                .option("log", "secured")
            )

        rows = reader().option("authTokenFile", str(token)).load().collect()
        assert sorted(r.data for r in rows) == [b"r%02d" % i for i in range(20)]
        with pytest.raises(Exception, match=r"Unauthorized|UNAUTHENTICATED|token"):
            reader().load().collect()

        archive = tmp_path / "archive"
        with pytest.raises(Exception, match=r"Unauthorized|UNAUTHENTICATED|token"):
            archive_log(spark, cluster.metadata_uri, "secured", archive)
        access = BookieAccess(auth_token_file=str(token))
        result = archive_log(spark, cluster.metadata_uri, "secured", archive, access=access)
        assert result.resumed and result.rows == 20
        archived = spark.read.parquet(str(archive)).collect()
        assert sorted(r.data for r in archived) == [b"r%02d" % i for i in range(20)]
