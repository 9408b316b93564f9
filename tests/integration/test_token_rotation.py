"""Secrets rotate without a restart: SIGHUP makes a bookie read its token file again
(clients holding the old token keep working through the grace period and are refused after
it, clients with the new token work throughout; the token never shows in the log) and its
TLS certificate and key (new connections get the new certificate)."""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import walog.aio as aio
from tests.integration.bookies import BookieProcess
from tests.pki import make_certificates
from walog.config import ClientConfig, Timeouts
from walog.errors import BookieError, UnauthorizedError
from walog.transport.credentials import TlsConfig

CONFIG = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0))
GRACE_S = 3.0


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[tuple[BookieProcess, Path]]:
    token = tmp_path / "token"
    token.write_text("old-s3cret\n")
    process = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=["--auth-token-file", str(token), "--auth-token-grace-s", str(GRACE_S)],
    )
    try:
        process.start().wait_ready()  # the health service needs no token
        yield process, token
    finally:
        process.stop_quietly()


async def _write(uri: str, **credentials: Any) -> None:
    # A fresh client each time: new connections are the ones that meet the new secrets.
    async with await aio.connect(uri, config=CONFIG, **credentials) as client:
        writer = await client.create_ledger(1, 1, 1)
        await writer.append(b"entry")
        await writer.close()


async def test_old_token_works_through_the_grace_period_then_is_refused(
    bookie: tuple[BookieProcess, Path],
) -> None:
    process, token_file = bookie
    uri = process.metadata
    await _write(uri, auth_token="old-s3cret")
    token_file.write_text("new-s3cret\n")
    process.signal(signal.SIGHUP)
    rotated = time.monotonic()
    deadline = rotated + 10
    while time.monotonic() < deadline:  # the bookie takes the signal in a moment
        try:
            await _write(uri, auth_token="new-s3cret")
            break
        except UnauthorizedError:
            continue
    await _write(uri, auth_token="old-s3cret")  # within the grace period
    assert time.monotonic() - rotated < GRACE_S
    while time.monotonic() - rotated < GRACE_S + 0.5:
        await _write(uri, auth_token="new-s3cret")  # the new token works throughout
    with pytest.raises(UnauthorizedError):
        await _write(uri, auth_token="old-s3cret")
    await _write(uri, auth_token="new-s3cret")
    log = process.log()
    assert "auth token rotated" in log
    assert "s3cret" not in log


async def test_sighup_reloads_the_tls_certificate_for_new_connections(tmp_path: Path) -> None:
    old, new = make_certificates(tmp_path / "old"), make_certificates(tmp_path / "new")
    live = tmp_path / "live"
    live.mkdir()
    for name in ("server.pem", "server.key"):
        shutil.copy(old / name, live / name)
    process = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=["--tls-cert", str(live / "server.pem"), "--tls-key", str(live / "server.key")],
    )
    process.channel_credentials = TlsConfig(ca=old / "ca.pem").channel_credentials()
    try:
        process.start().wait_ready()
        uri = process.metadata
        await _write(uri, tls=TlsConfig(ca=old / "ca.pem"))
        for name in ("server.pem", "server.key"):
            shutil.copy(new / name, live / name)
        process.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while True:  # the bookie takes the signal in a moment
            try:
                await _write(uri, tls=TlsConfig(ca=new / "ca.pem"))
                break
            except BookieError:
                if time.monotonic() > deadline:
                    raise
        assert "TLS certificate reloaded" in process.log()
    finally:
        process.stop_quietly()
