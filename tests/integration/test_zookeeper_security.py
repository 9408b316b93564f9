"""ZooKeeper digest authentication, ACLs and TLS on a real ZooKeeper.

With credentials in the metadata URI (or an ``auth_file``), every record walog creates is
readable and writable by walog's principal only, readable by an optional read-only
principal, and closed to everyone else: an unauthenticated client cannot read a ledger's
metadata (which holds the digest of its password) or change anything.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import walog
from tests.integration.acl_checks import assert_reads_only, assert_shut_out
from tests.pki import make_certificates
from walog.errors import MetadataError, UnauthorizedError
from walog.metadata.layout import ledger_path, log_path
from walog.metadata.uri import parse_uri
from walog.testing import LocalCluster, ZooKeeperError, ZooKeeperServer, free_port


def kazoo(server: ZooKeeperServer, auth: str | None = None) -> KazooClient:
    client = KazooClient(
        hosts=server.connect_string, auth_data=[("digest", auth)] if auth else None
    )
    client.start(timeout=10)
    return client


@pytest.fixture
def secured(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[tuple[LocalCluster, str]]:
    """3 bookies on a chroot of their own, walog authenticating as ``walog`` (secret in a
    file) with ``dash`` as the read-only principal."""
    (tmp_path / "walog.auth").write_text("walog:s3cret-walog\n")
    (tmp_path / "dash.auth").write_text("dash:s3cret-dash\n")
    chroot = f"/acl-{uuid.uuid4().hex[:12]}"
    uri = (
        f"zk://{zookeeper.connect_string}{chroot}?session_timeout=4"
        f"&auth_file={tmp_path / 'walog.auth'}&reader_auth_file={tmp_path / 'dash.auth'}"
    )
    with LocalCluster(bookies=3, metadata=uri) as cluster:
        yield cluster, chroot


def test_an_authenticated_client_works_and_others_are_shut_out(
    zookeeper: ZooKeeperServer, secured: tuple[LocalCluster, str]
) -> None:
    cluster, chroot = secured
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log("secured")
        with log.open_writer() as writer:
            writer.append(b"record")
        ledger = client.create_ledger(password=b"ledger-secret")
        ledger.append(b"entry")
        ledger.close()
        assert [r.data for r in _read(log)] == [b"record"]

    paths = [chroot + log_path("secured"), chroot + ledger_path(ledger.ledger_id)]
    assert_shut_out(kazoo(zookeeper), chroot, paths)
    assert_reads_only(kazoo(zookeeper, "dash:s3cret-dash"), chroot, paths)


def test_wrong_credentials_are_one_clear_error_without_the_secret(
    secured: tuple[LocalCluster, str], tmp_path: Path
) -> None:
    cluster, chroot = secured
    config = parse_uri(cluster.metadata_uri)
    wrong = f"zk://walog:not-the-secret@{','.join(config.hosts)}{chroot}"  # type: ignore[union-attr]
    with pytest.raises(UnauthorizedError) as refused, walog.connect(wrong, timeout=5) as client:
        client.bookies()
    assert "not authorised" in str(refused.value)
    assert "not-the-secret" not in str(refused.value)


def test_secrets_of_a_uri_never_appear_in_its_errors() -> None:
    with pytest.raises(ValueError) as bad:
        parse_uri("zk://walog:hunter2@localhost:2181/x?session_timeout=-1")
    assert "hunter2" not in str(bad.value) and "walog:***@" in str(bad.value)
    assert "hunter2" not in repr(parse_uri("zk://walog:hunter2@localhost:2181/x"))


def _read(log: walog.Log) -> list[walog.Record]:
    with log.open_reader("earliest") as reader:
        out = []
        while (record := reader.read_next(timeout=1.0)) is not None:
            out.append(record)
        return out


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """A ZooKeeper whose secure client port requires TLS with a client certificate (PEM
    key and trust stores); yields that port and the certificates' directory."""
    pki = make_certificates(tmp_path_factory.mktemp("zk-tls") / "pki")
    bundle = pki / "server-bundle.pem"
    bundle.write_text((pki / "server.key").read_text() + (pki / "server.pem").read_text())
    port = free_port()
    extra = (
        f"secureClientPort={port}\n"
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
        f"ssl.keyStore.location={bundle}\nssl.keyStore.type=PEM\n"
        f"ssl.trustStore.location={pki / 'ca.pem'}\nssl.trustStore.type=PEM\n"
        "ssl.clientAuth=need\n"
    )
    try:
        server = ZooKeeperServer(extra_config=extra).start()
    except ZooKeeperError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield port, pki
    server.stop()


@pytest.mark.zk
def test_bookies_and_clients_reach_zookeeper_over_tls(tls_zookeeper: tuple[int, Path]) -> None:
    port, pki = tls_zookeeper
    tls = f"tls_ca={pki / 'ca.pem'}&tls_cert={pki / 'client.pem'}&tls_key={pki / 'client.key'}"
    uri = f"zk://127.0.0.1:{port}/tls-{uuid.uuid4().hex[:8]}?session_timeout=4&{tls}"
    with LocalCluster(bookies=3, metadata=uri) as cluster, walog.connect(uri) as client:
        log = client.open_log("over-tls")
        with log.open_writer() as writer:
            writer.append(b"record")
        assert [r.data for r in _read(log)] == [b"record"]
        assert sorted(client.bookies()) == sorted(cluster.bookie_ids)
    # Without TLS the secure port never completes a session: one clear error.
    plain = f"zk://127.0.0.1:{port}/plain"
    with pytest.raises(MetadataError), walog.connect(plain, timeout=3):
        pass
