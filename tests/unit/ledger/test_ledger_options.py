"""Ledger settings are one LedgerOptions object, checked by one rule on every creation path.

The paths a user reaches (a client's ``create_ledger``, sync and async; a log's writers,
through ``open_log``; the Spark sink's options) refuse a bad setting where it is given, with
the same message naming the bad value. A real SQLite metadata store and no bookies: every
refusal comes before a bookie is needed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import walog
import walog.aio
from walog.ledger.options import LedgerOptions, check_ledger_options
from walog.spark.options import WriteOptions
from walog.wire.durability import Durability

BAD = [
    ((2, 3, 2, Durability.PERSISTENT), "write_quorum=3 is above ensemble_size=2"),
    ((3, 2, 3, Durability.PERSISTENT), "write_quorum=2 is below ack_quorum=3"),
    ((3, 3, 0, Durability.PERSISTENT), "ack_quorum=0 is below 1"),
    ((0, 0, 0, Durability.PERSISTENT), "ack_quorum=0 is below 1"),
    ((3, 2, 2, Durability.VOLATILE), "VOLATILE ledgers cannot be striped"),
]
RULE = "need ensemble_size >= write_quorum >= ack_quorum >= 1"


@pytest.fixture
def sqlite_uri(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path}/meta.db"


@pytest.fixture
def sync_client(sqlite_uri: str) -> Iterator[walog.Client]:
    with walog.connect(sqlite_uri) as client:
        yield client


Settings = tuple[int, int, int, Durability]


def _spark(settings: Settings) -> None:
    e, qw, qa, durability = settings
    assert durability is Durability.PERSISTENT  # the sink's ledgers are persistent
    options = {"metadata": "sqlite:///x.db", "log": "l"}
    options |= {"ensembleSize": str(e), "writeQuorum": str(qw), "ackQuorum": str(qa)}
    WriteOptions.parse(options, streaming=False)


@pytest.mark.parametrize(("settings", "message"), BAD, ids=[m for _, m in BAD])
async def test_every_ledger_creation_path_refuses_bad_settings_with_the_one_check(
    settings: Settings, message: str, sqlite_uri: str, sync_client: walog.Client
) -> None:
    e, qw, qa, durability = settings
    async with await walog.aio.connect(sqlite_uri) as client:
        paths: dict[str, Callable[[], Awaitable[Any] | None]] = {
            "LedgerOptions": lambda: LedgerOptions(e, qw, qa, durability) and None,
            "AsyncClient.create_ledger": lambda: client.create_ledger(
                e, qw, qa, durability=durability
            ),
            "Client.create_ledger": lambda: (
                sync_client.create_ledger(e, qw, qa, durability=durability) and None
            ),
            "AsyncClient.open_log": lambda: client.open_log(
                "refused", ensemble_size=e, write_quorum=qw, ack_quorum=qa, durability=durability
            ),
        }
        if durability is Durability.PERSISTENT:
            paths["spark sink options"] = lambda: _spark(settings)
        for path, call in paths.items():
            with pytest.raises(ValueError) as caught:
                pending = call()
                if pending is not None:
                    await pending
            assert message in str(caught.value), path
            if durability is Durability.PERSISTENT:
                assert RULE in str(caught.value), path
        assert await client.list_logs() == []  # no log was created by a refused open_log


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ((3.0, 3, 2, Durability.PERSISTENT, b""), "ensemble_size must be a whole number"),
        ((3, True, 2, Durability.PERSISTENT, b""), "write_quorum must be a whole number"),
        ((3, 3, 2, "persistent", b""), "durability must be a walog.Durability"),
        ((3, 3, 2, Durability.PERSISTENT, "secret"), "password must be bytes"),
    ],
)
def test_a_ledger_setting_of_the_wrong_type_is_refused_by_name(
    settings: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        check_ledger_options(*settings)
    with pytest.raises(TypeError, match=message):
        LedgerOptions(*settings)


async def test_custom_metadata_must_map_str_to_str(sqlite_uri: str) -> None:
    async with await walog.aio.connect(sqlite_uri) as client:
        with pytest.raises(TypeError, match="custom_metadata"):
            await client.create_ledger(custom_metadata={"a": 1})  # type: ignore[dict-item]
