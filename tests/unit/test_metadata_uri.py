"""Metadata URIs and record paths: the accepted forms, and one clear error for the rest."""

from __future__ import annotations

import pytest

from walog.metadata import open_store
from walog.metadata.uri import (
    DEFAULT_CHROOT,
    SqliteURI,
    ZooKeeperURI,
    check_path,
    parent_of,
    parse_uri,
)


def test_zk_uri_with_several_hosts_and_chroot() -> None:
    parsed = parse_uri("zk://10.0.0.1:2181,zk-2.example:2182/prod/walog")
    assert parsed == ZooKeeperURI(("10.0.0.1:2181", "zk-2.example:2182"), "/prod/walog")
    assert isinstance(parsed, ZooKeeperURI)
    assert parsed.connect_string == "10.0.0.1:2181,zk-2.example:2182"


@pytest.mark.parametrize("uri", ["zk://127.0.0.1:2181", "zk://127.0.0.1:2181/"])
def test_zk_uri_without_chroot_uses_default(uri: str) -> None:
    parsed = parse_uri(uri)
    assert isinstance(parsed, ZooKeeperURI) and parsed.chroot == DEFAULT_CHROOT == "/walog"


def test_zk_uri_session_timeout_option() -> None:
    parsed = parse_uri("zk://[::1]:2181/w?session_timeout=2.5")
    assert isinstance(parsed, ZooKeeperURI) and parsed.session_timeout == 2.5


def test_zk_credentials_authenticate_by_digest_unless_sasl_is_asked_for() -> None:
    digest = parse_uri("zk://walog:s@h:1/w")
    sasl = parse_uri("zk://walog:s@h:1/w?auth_scheme=sasl")
    assert isinstance(digest, ZooKeeperURI) and digest.auth_scheme == "digest"
    assert isinstance(sasl, ZooKeeperURI) and sasl.auth_scheme == "sasl"
    assert sasl.auth is not None and sasl.auth.user == "walog"


def test_sqlite_uri_absolute_path_and_defaults() -> None:
    parsed = parse_uri("sqlite:///var/lib/walog/meta.db")
    assert parsed == SqliteURI("/var/lib/walog/meta.db")
    assert isinstance(parsed, SqliteURI)
    assert (parsed.session_timeout, parsed.heartbeat, parsed.poll) == (3.0, 0.5, 0.02)


def test_sqlite_short_session_timeout_shortens_heartbeat() -> None:
    parsed = parse_uri("sqlite:///tmp/m.db?session_timeout=1")
    assert isinstance(parsed, SqliteURI) and parsed.heartbeat == 0.25


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("meta.db", "missing scheme"),
        ("etcd://h:1/x", "unknown scheme"),
        ("zk:///walog", "no ZooKeeper HOST:PORT"),
        ("zk://localhost/walog", "is not HOST:PORT"),
        ("zk://h:99999/walog", "out of range"),
        ("zk://h:1/a//b", "bad chroot"),
        ("zk://h:1/a?timeout=3", "unknown option"),
        ("sqlite://relative/meta.db", "three slashes"),
        ("sqlite:///", "no database file name"),
        ("sqlite:///tmp/m.db?session_timeout=-1", "must be > 0"),
        ("sqlite:///tmp/m.db?session_timeout=abc", "not a number"),
        ("sqlite:///tmp/m.db?heartbeat=5", "must be shorter than"),
        ("zk://u:p@h:1/a?auth_scheme=kerberos", "expected 'digest' or 'sasl'"),
        ("zk://h:1/a?auth_scheme=sasl", "auth_scheme needs credentials"),
    ],
)
def test_bad_uri_raises_one_value_error_naming_problem_and_forms(uri: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_uri(uri)
    message = str(info.value)
    assert problem in message
    assert "zk://HOST:PORT" in message and "sqlite:///ABS/PATH.db" in message


async def test_open_store_rejects_bad_uri_before_connecting() -> None:
    with pytest.raises(ValueError, match="unknown scheme"):
        await open_store("mysql://db/walog")


@pytest.mark.parametrize("path", ["/", "/a", "/ledgers/12", "/bookies/available/127.0.0.1:3181"])
def test_valid_paths_pass(path: str) -> None:
    assert check_path(path) == path


@pytest.mark.parametrize("path", ["", "a", "/a/", "/a//b", "/./a", "/a/..", "/a\x00b"])
def test_invalid_paths_raise_value_error(path: str) -> None:
    with pytest.raises(ValueError, match="metadata path"):
        check_path(path)


def test_parent_of() -> None:
    assert parent_of("/a") == "/"
    assert parent_of("/a/b/c") == "/a/b"
