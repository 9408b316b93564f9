"""ZooKeeper SASL (DIGEST-MD5) authentication on a real ZooKeeper: ``auth_scheme=sasl``.

The server checks walog's secret against the ``Server`` section of its JAAS file; every
record walog creates grants ``sasl:walog`` all rights and ``sasl:dash`` (the read-only
principal) read rights: an unauthenticated client reads and changes nothing, the dashboard
reads and changes nothing, a wrong secret is one clear error without the secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import walog
from tests.integration.acl_checks import assert_reads_only, assert_shut_out
from walog.errors import UnauthorizedError
from walog.metadata.layout import ledger_path, log_path
from walog.testing import LocalCluster, ZooKeeperServer

pytestmark = pytest.mark.zk

JAAS = """Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_walog="s3cret-walog"
    user_dash="s3cret-dash";
};
"""


@pytest.fixture(scope="module")
def sasl_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper that authenticates clients with SASL against a JAAS file."""
    jaas = tmp_path_factory.mktemp("zk-sasl") / "jaas.conf"
    jaas.write_text(JAAS)
    server = ZooKeeperServer(
        extra_config="authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
        jvm_flags=(f"-Djava.security.auth.login.config={jaas}",),
    ).start()
    try:
        yield server
    finally:
        server.stop()


def sasl_kazoo(server: ZooKeeperServer, user: str | None, secret: str = "") -> KazooClient:
    options = {"mechanism": "DIGEST-MD5", "username": user, "password": secret}
    client = KazooClient(hosts=server.connect_string, sasl_options=options if user else None)
    client.start(timeout=10)
    return client


def sasl_uri(server: ZooKeeperServer, tmp_path: Path, chroot: str, secret: str) -> str:
    (tmp_path / "walog.auth").write_text(f"walog:{secret}\n")
    (tmp_path / "dash.auth").write_text("dash:s3cret-dash\n")
    return (
        f"zk://{server.connect_string}{chroot}?session_timeout=4&auth_scheme=sasl"
        f"&auth_file={tmp_path / 'walog.auth'}&reader_auth_file={tmp_path / 'dash.auth'}"
    )


def test_sasl_authenticated_walog_owns_its_records_and_others_only_read_or_nothing(
    sasl_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/sasl-{uuid.uuid4().hex[:12]}"
    uri = sasl_uri(sasl_zookeeper, tmp_path, chroot, "s3cret-walog")
    with (
        LocalCluster(bookies=1, metadata=uri, data_dir=tmp_path / "c") as cluster,
        walog.connect(cluster.metadata_uri) as client,
    ):
        log = client.open_log("secured", ensemble_size=1, write_quorum=1, ack_quorum=1)
        with log.open_writer() as writer:
            writer.append(b"record")
        ledger = client.create_ledger(1, 1, 1, password=b"ledger-secret")
        ledger.append(b"entry")
        ledger.close()
    paths = [chroot + log_path("secured"), chroot + ledger_path(ledger.ledger_id)]

    assert_shut_out(sasl_kazoo(sasl_zookeeper, None), chroot, paths)
    assert_reads_only(sasl_kazoo(sasl_zookeeper, "dash", "s3cret-dash"), chroot, paths)


def test_a_wrong_sasl_secret_is_one_clear_error_without_the_secret(
    sasl_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    uri = sasl_uri(sasl_zookeeper, tmp_path, "/sasl-wrong", "not-the-secret")
    with pytest.raises(UnauthorizedError) as refused, walog.connect(uri, timeout=5) as client:
        client.bookies()
    assert "not authorised" in str(refused.value)
    assert "not-the-secret" not in str(refused.value)
