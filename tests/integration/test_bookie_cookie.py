"""Cookies (seed 003): a bookie whose disk lost its state must refuse to rejoin silently.

The rules run in-process against a real SQLite store; one test starts real processes to
check the operator-facing side (exit status, message, ``--allow-format``).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from bookie.config import BookieConfig
from bookie.cookie import COOKIE_FILE, Cookie, check_cookie
from tests.integration.bookies import BookieProcess
from walog.errors import CookieMismatchError
from walog.metadata import open_store
from walog.metadata.layout import cookie_path
from walog.metadata.store import MetadataStore
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MetadataStore]:
    opened = await open_store(f"sqlite:///{tmp_path}/meta.db")
    yield opened
    await opened.close()


def config(tmp_path: Path, **changes: object) -> BookieConfig:
    settings: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "listen": "127.0.0.1:3181",
        "metadata": f"sqlite:///{tmp_path}/meta.db",
    }
    settings.update(changes)
    return BookieConfig(**settings)  # type: ignore[arg-type]


async def test_new_bookie_is_formatted_when_no_cookie_exists_anywhere(
    store: MetadataStore, tmp_path: Path
) -> None:
    cfg = config(tmp_path)
    cookie = await check_cookie(store, cfg)
    raw, _ = await store.get(cookie_path(cfg.bookie_id))
    assert Cookie.from_json(raw, "metadata") == cookie
    assert Cookie.from_json((cfg.data_dir / COOKIE_FILE).read_bytes(), "disk") == cookie
    # The next start finds both copies and keeps the same instance.
    assert await check_cookie(store, cfg) == cookie


async def test_a_wiped_disk_rejoins_its_old_id_only_naming_the_lost_instance(
    store: MetadataStore, tmp_path: Path
) -> None:
    # Seed 003: formatted under its old id, the bookie would answer "no such entry" for
    # entries it acknowledged, which recovery takes as proof of absence.
    cfg = config(tmp_path)
    first = await check_cookie(store, cfg)
    shutil.rmtree(cfg.data_dir)
    with pytest.raises(CookieMismatchError, match="lost its state") as refused:
        await check_cookie(store, cfg)
    message = str(refused.value)
    assert "no such entry" in message and "new bookie id" in message
    assert f"--discard-instance {first.instance_id}" in message
    with pytest.raises(CookieMismatchError, match=first.instance_id):
        await check_cookie(store, config(tmp_path, allow_format=True))
    with pytest.raises(CookieMismatchError, match="does not name the lost incarnation"):
        await check_cookie(store, config(tmp_path, allow_format=True, discard_instance="x"))
    formatted = await check_cookie(
        store, config(tmp_path, allow_format=True, discard_instance=first.instance_id)
    )
    assert formatted.instance_id != first.instance_id
    assert await check_cookie(store, cfg) == formatted


async def test_moved_directories_need_only_allow_format(
    store: MetadataStore, tmp_path: Path
) -> None:
    cfg = config(tmp_path, data_dir=tmp_path / "old")
    first = await check_cookie(store, cfg)
    (tmp_path / "old").rename(tmp_path / "new")
    moved = config(tmp_path, data_dir=tmp_path / "new")
    with pytest.raises(CookieMismatchError, match="--allow-format") as refused:
        await check_cookie(store, moved)
    assert "--discard-instance" not in str(refused.value)  # the instance is on the disk
    formatted = await check_cookie(
        store, config(tmp_path, data_dir=tmp_path / "new", allow_format=True)
    )
    assert formatted.instance_id != first.instance_id


def test_discard_instance_without_allow_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--discard-instance only confirms --allow-format"):
        config(tmp_path, discard_instance="abc")


async def test_disk_cookie_without_metadata_cookie_is_refused(
    store: MetadataStore, tmp_path: Path
) -> None:
    cfg = config(tmp_path)
    await check_cookie(store, cfg)
    await store.delete(cookie_path(cfg.bookie_id))
    with pytest.raises(CookieMismatchError, match="metadata store has no cookie"):
        await check_cookie(store, cfg)


async def test_foreign_disk_is_refused(store: MetadataStore, tmp_path: Path) -> None:
    ours = config(tmp_path, data_dir=tmp_path / "a", listen="127.0.0.1:3181")
    theirs = config(tmp_path, data_dir=tmp_path / "b", listen="127.0.0.1:3182")
    await check_cookie(store, ours)
    await check_cookie(store, theirs)
    # The other bookie's disk mounted where ours was.
    shutil.rmtree(ours.data_dir)
    shutil.copytree(theirs.data_dir, ours.data_dir)
    with pytest.raises(CookieMismatchError, match="does not match"):
        await check_cookie(store, ours)


async def test_lost_journal_disk_is_refused(store: MetadataStore, tmp_path: Path) -> None:
    cfg = config(tmp_path, journal_dir=tmp_path / "journal-disk")
    await check_cookie(store, cfg)
    shutil.rmtree(tmp_path / "journal-disk")
    with pytest.raises(CookieMismatchError, match=r"journal-disk has no cookie\.json"):
        await check_cookie(store, cfg)


def test_wiped_bookie_process_exits_non_zero_until_the_lost_instance_is_named(
    tmp_path: Path,
) -> None:
    bookie = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db")
    try:
        bookie.start().wait_ready()
        with grpc.insecure_channel(bookie.bookie_id) as channel:
            first = pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
        assert bookie.terminate() == 0

        shutil.rmtree(bookie.data_dir)
        assert bookie.start().wait(timeout=60) != 0
        assert "lost its state" in bookie.log()
        assert f"--discard-instance {first.instance_id}" in bookie.log()
        assert bookie.start(["--allow-format"]).wait(timeout=60) != 0

        bookie.restart(["--allow-format", "--discard-instance", first.instance_id])
        with grpc.insecure_channel(bookie.bookie_id) as channel:
            second = pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
        assert second.instance_id != first.instance_id
    finally:
        bookie.stop_quietly()
