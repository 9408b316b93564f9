"""The state-machine recipe when its leader loses ZooKeeper for longer than its session
timeout while nothing is in flight: the leader's log writer stops (it presumes its session
expired), yet the session can outlive the outage (ZooKeeper keeps it for the timeout the
server granted, or through a leader election) and the leader keep its election record. The
leader must give its term up at the next command, so that a node with a working writer
leads and commands are served again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cutting_proxy import CuttingProxy
from tests.integration.recipes.test_state_machine import Counter, is_leader, node
from walog.errors import SessionExpiredError
from walog.recipes import AsyncStateMachine
from walog.testing import LocalCluster, ZooKeeperServer

SESSION_S = 1.5
"""The nodes' own session timeout: a node presumes its session expired after this long
without ZooKeeper."""
SERVER_SESSION_MS = 30_000
"""What the server grants at least: sessions outlive the outage."""


@pytest.fixture
def lenient_zookeeper() -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of its own that keeps every session at least 30 s."""
    with ZooKeeperServer(extra_config=f"minSessionTimeout={SERVER_SESSION_MS}\n") as server:
        yield server


async def first_leader(*machines: AsyncStateMachine) -> AsyncStateMachine:
    """The first of ``machines`` to lead (each one's wait wakes on its own changes only)."""
    waits = {
        asyncio.ensure_future(m.wait_for(lambda m=m: is_leader(m), 30)): m  # type: ignore[misc]
        for m in machines
    }
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in pending:
        waiting.cancel()
    first = done.pop()
    first.result()  # raises the TimeoutError when nobody led in time
    return waits[first]


async def test_a_leader_whose_log_writer_stopped_gives_its_term_up_at_the_next_command(
    lenient_zookeeper: ZooKeeperServer, tmp_path: Path, log_name: str
) -> None:
    zookeeper = lenient_zookeeper
    chroot = f"/sm-outage-{uuid.uuid4().hex[:12]}"
    with (
        LocalCluster(bookies=3, metadata=zookeeper.uri(chroot), data_dir=tmp_path / "cluster"),
        CuttingProxy(("127.0.0.1", zookeeper.port)) as link,
    ):
        # Node a reaches ZooKeeper through the proxy, node b directly.
        a_uri = f"zk://127.0.0.1:{link.port}{chroot}?session_timeout={SESSION_S}"
        b_uri = zookeeper.uri(chroot, session_timeout=SESSION_S)
        a_state, b_state = Counter(), Counter()
        async with node(a_uri, log_name, "a", a_state) as (_, a):
            await a.wait_for(lambda: is_leader(a), 30)
            assert await a.submit(b"before") == 1
            async with node(b_uri, log_name, "b", b_state) as (_, b):
                await b.wait_for(lambda: b_state.seen == ["before"], 30)
                link.cut_off(3 * SESSION_S)
                # The outage lasts this long; a's writer stops half way through it.
                await asyncio.sleep(3 * SESSION_S)
                assert is_leader(a), "the election record outlived the outage"
                with pytest.raises(SessionExpiredError):
                    await a.submit(b"refused")
                await a.wait_for(lambda: not is_leader(a), 10)
                leader = await first_leader(a, b)
                assert await leader.submit(b"after") == 2
                await a.wait_for(lambda: a_state.seen == ["before", "after"], 30)
                await b.wait_for(lambda: b_state.seen == ["before", "after"], 30)
