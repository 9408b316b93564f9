"""Leader suggestion (seed 003): one leader at a time, epochs strictly increase per term."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from walog.errors import NewerFormatError
from walog.metadata import MetadataStore, open_store
from walog.metadata.election import ELECTION_RECORD_FORMAT, current_leader, elect, leader_path

WITHIN_S = 20.0


@pytest.fixture(params=["sqlite", pytest.param("zk", marks=pytest.mark.zk)])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/meta.db?session_timeout=1.5"
    zookeeper = request.getfixturevalue("zookeeper")
    return str(zookeeper.uri(f"/election-{uuid.uuid4().hex[:12]}", session_timeout=2))


@pytest.fixture
async def stores(store_uri: str) -> AsyncIterator[list[MetadataStore]]:
    opened = [await open_store(store_uri) for _ in range(3)]
    yield opened
    for store in opened:
        await store.close()


async def test_second_candidate_waits_until_leader_resigns(stores: list[MetadataStore]) -> None:
    first = await elect(stores[0], "svc", "a")
    waiting = asyncio.create_task(elect(stores[1], "svc", "b"))
    done, _ = await asyncio.wait({waiting}, timeout=0.5)  # it must not win while "a" leads
    assert not done
    assert await current_leader(stores[2], "svc") == ("a", first.epoch)
    await first.resign()
    assert first.lost.is_set()
    second = await asyncio.wait_for(waiting, WITHIN_S)
    assert second.epoch > first.epoch
    assert await current_leader(stores[2], "svc") == ("b", second.epoch)
    await second.resign()


async def test_epochs_strictly_increase_across_terms(stores: list[MetadataStore]) -> None:
    epochs = []
    for round_ in range(4):
        term = await elect(stores[round_ % 3], "svc", f"c{round_}")
        epochs.append(term.epoch)
        await term.resign()
    assert epochs == sorted(epochs) and len(set(epochs)) == 4


async def test_leader_store_closed_lets_next_candidate_win(stores: list[MetadataStore]) -> None:
    first = await elect(stores[0], "svc", "a")
    waiting = asyncio.create_task(elect(stores[1], "svc", "b"))
    await stores[0].close()
    second = await asyncio.wait_for(waiting, WITHIN_S)
    assert second.epoch > first.epoch
    await second.resign()


async def test_term_lost_when_record_is_removed(stores: list[MetadataStore]) -> None:
    term = await elect(stores[0], "svc", "a")
    await stores[1].delete(leader_path("svc"))
    await asyncio.wait_for(term.lost.wait(), WITHIN_S)
    assert not term.is_leader


async def test_cancelled_campaign_leaves_no_record(stores: list[MetadataStore]) -> None:
    leader = await elect(stores[0], "svc", "a")
    campaign = asyncio.create_task(elect(stores[1], "svc", "b"))
    done, _ = await asyncio.wait({campaign}, timeout=0.3)
    assert not done
    campaign.cancel()
    with pytest.raises(asyncio.CancelledError):
        await campaign
    await leader.resign()
    assert await current_leader(stores[2], "svc") is None
    third = await asyncio.wait_for(elect(stores[2], "svc", "c"), WITHIN_S)
    assert third.epoch > leader.epoch
    await third.resign()


async def _put_leader_record(store: MetadataStore, name: str, doc: dict[str, object]) -> None:
    """A leader record holding ``doc`` at version 1, as a term's record stands (no term
    of this test owns it, so none ends on seeing it changed)."""
    await store.create(leader_path(name), b"")
    await store.set(leader_path(name), json.dumps(doc).encode(), 0)


async def test_a_newer_election_record_version_is_refused_naming_both_versions(
    stores: list[MetadataStore],
) -> None:
    newer = ELECTION_RECORD_FORMAT + 1
    doc = {"format": newer, "candidate": "a", "token": "t", "epoch": 3, "a_field": 1}
    await _put_leader_record(stores[1], "svc", doc)
    both = re.escape(
        f"election 'svc''s leader record has format version {newer}; "
        f"this walog reads up to {ELECTION_RECORD_FORMAT}: upgrade walog"
    )
    with pytest.raises(NewerFormatError, match=both):
        await current_leader(stores[2], "svc")
    term = await elect(stores[0], "other", "a")
    raw, _ = await stores[2].get(leader_path("other"))
    assert json.loads(raw)["format"] == ELECTION_RECORD_FORMAT
    await term.resign()


async def test_an_election_record_without_a_format_reads_as_version_1(
    stores: list[MetadataStore],
) -> None:
    # As walog 0.1.0 wrote it.
    await _put_leader_record(stores[1], "svc", {"candidate": "a", "token": "t", "epoch": 3})
    assert await current_leader(stores[2], "svc") == ("a", 3)


async def test_bad_election_name_raises_value_error(stores: list[MetadataStore]) -> None:
    with pytest.raises(ValueError, match="must be a non-empty name"):
        await elect(stores[0], "a/b", "x")


@pytest.mark.zk
async def test_zookeeper_session_expiry_ends_term_and_next_epoch_is_larger(
    zookeeper: object, zk_uri: str
) -> None:
    owner = await open_store(zk_uri + "?session_timeout=2")
    rival = await open_store(zk_uri)
    try:
        term = await elect(owner, "svc", "a")
        waiting = asyncio.create_task(elect(rival, "svc", "b"))
        session = owner._client.client_id  # type: ignore[attr-defined]
        intruder = KazooClient(hosts=zookeeper.connect_string, client_id=session)  # type: ignore[attr-defined]
        await asyncio.to_thread(intruder.start)
        await asyncio.to_thread(intruder.stop)  # closing the shared session expires it
        await asyncio.to_thread(intruder.close)
        await asyncio.wait_for(term.lost.wait(), WITHIN_S)
        successor = await asyncio.wait_for(waiting, WITHIN_S)
        assert successor.epoch > term.epoch
        await successor.resign()
    finally:
        await owner.close()
        await rival.close()
