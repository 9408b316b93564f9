"""Writing to a bookie that requires mutual TLS and a bearer token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import walog.aio as aio
from tests.integration.bookies import BookieProcess
from tests.pki import make_certificates
from walog import main as cli
from walog.config import ClientConfig, Timeouts
from walog.errors import UnauthorizedError
from walog.transport.credentials import TlsConfig
from walog.transport.native import NativeCallError, NativeConnection
from walog.transport.network import NetworkBookieClient

CONFIG = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, TlsConfig]]:
    """One bookie with mutual TLS and a token; yields the metadata URI and client TLS."""
    pki = tmp_path / "pki"
    make_certificates(pki)
    (tmp_path / "token").write_text("s3cret\n")
    uri = f"sqlite:///{tmp_path}/meta.db"
    bookie = BookieProcess(
        tmp_path / "bookie",
        uri,
        extra_args=[
            "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
            "--tls-ca", str(pki / "ca.pem"), "--auth-token-file", str(tmp_path / "token"),
        ],
    )  # fmt: skip
    tls = TlsConfig(ca=pki / "ca.pem", cert=pki / "client.pem", key=pki / "client.key")
    bookie.channel_credentials = tls.channel_credentials()
    try:
        bookie.start().wait_ready()
        yield uri, tls
    finally:
        bookie.stop_quietly()


async def test_client_with_tls_and_token_writes_and_reads(
    secured: tuple[str, TlsConfig],
) -> None:
    uri, tls = secured
    async with await aio.connect(uri, tls=tls, auth_token="s3cret", config=CONFIG) as client:
        writer = await client.create_ledger(1, 1, 1)
        assert await writer.append(b"over tls") == 0
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id)
        assert [e.data for e in await reader.read(0, 0)] == [b"over tls"]
        (bookie,) = await client.bookies()
        connection = client.ctx.pool.get(bookie)
        assert isinstance(connection, NetworkBookieClient)
        assert connection.transport == "native"  # TLS and the token on the native port too
        # No Unix socket beside a TLS port: it would let local clients skip the certificates.
        assert (await connection.info()).native_socket == ""
        assert connection._route.current is not None
        assert connection._route.current.unix_path is None


async def _native_port(secured: tuple[str, TlsConfig]) -> tuple[int, TlsConfig]:
    """The secured bookie's native port (asked over gRPC, with the right credentials)."""
    uri, tls = secured
    async with await aio.connect(uri, tls=tls, auth_token="s3cret", config=CONFIG) as client:
        (bookie,) = await client.bookies()
        connection = client.ctx.pool.get(bookie)
        assert isinstance(connection, NetworkBookieClient)
        return (await connection.info()).native_port, tls


async def test_native_port_refuses_a_wrong_token_in_its_hello(
    secured: tuple[str, TlsConfig],
) -> None:
    port, tls = await _native_port(secured)
    for token in ("wrong", None):
        with pytest.raises(NativeCallError) as refused:
            await NativeConnection.open(
                "bookie", "127.0.0.1", port, token=token, ssl_context=tls.ssl_context()
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    right = await NativeConnection.open(
        "bookie", "127.0.0.1", port, token="s3cret", ssl_context=tls.ssl_context()
    )
    right.close()


async def test_native_port_refuses_a_client_without_a_certificate(
    secured: tuple[str, TlsConfig],
) -> None:
    port, tls = await _native_port(secured)
    anonymous = TlsConfig(ca=tls.ca).ssl_context()
    with pytest.raises(NativeCallError) as refused:
        await NativeConnection.open(
            "bookie", "127.0.0.1", port, token="s3cret", ssl_context=anonymous, within=5.0
        )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_wrong_token_stops_the_writer_with_unauthorized_error(
    secured: tuple[str, TlsConfig],
) -> None:
    uri, tls = secured
    async with await aio.connect(uri, tls=tls, auth_token="wrong", config=CONFIG) as client:
        writer = await client.create_ledger(1, 1, 1)
        with pytest.raises(UnauthorizedError):
            await writer.append(b"refused")
        with pytest.raises(UnauthorizedError):
            writer.append_nowait(b"again")


def test_tls_config_needs_both_cert_and_key() -> None:
    with pytest.raises(ValueError, match="both cert and key"):
        TlsConfig(ca="ca.pem", cert="client.pem")


def test_missing_tls_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="CA file"):
        TlsConfig(ca=tmp_path / "absent.pem").channel_credentials()
    with pytest.raises(ValueError, match="CA file"):
        TlsConfig(ca=tmp_path / "absent.pem").ssl_context()


def test_channel_credentials_are_grpc_credentials(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    make_certificates(pki)
    assert isinstance(TlsConfig(ca=pki / "ca.pem").channel_credentials(), grpc.ChannelCredentials)


def test_the_cli_takes_the_clients_tls_and_token_options(
    secured: tuple[str, TlsConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, _ = secured
    pki = tmp_path / "pki"
    flags = [
        "--metadata", uri, "--timeout", "5",
        "--tls-ca", str(pki / "ca.pem"), "--tls-cert", str(pki / "client.pem"),
        "--tls-key", str(pki / "client.key"), "--auth-token-file", str(tmp_path / "token"),
    ]  # fmt: skip
    assert cli.main(["append", "secured-log", "over-tls", "--ensemble-size", "1",
                     "--write-quorum", "1", "--ack-quorum", "1", *flags]) == 0  # fmt: skip
    assert cli.main(["tail", "secured-log", "-n", "1", *flags]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].endswith("\tover-tls")
    assert "s3cret" not in out
