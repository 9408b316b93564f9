"""The auto-recovery daemon's metrics: ledgers that name an unavailable bookie are counted
as under-replicated until a pass repairs them."""

from __future__ import annotations

import asyncio
import signal
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

import walog.aio as aio
from tests.integration.waiting import eventually
from tests.processes import DIE_WITH_PARENT
from walog.testing import LocalCluster, free_port


def _scrape(url: str) -> dict[str, float]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
    except OSError as exc:  # not listening yet: the daemon is starting
        raise AssertionError(f"{url}: {exc}") from exc
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_ledgers_naming_a_lost_bookie_count_as_under_replicated_until_repaired(
    fresh_cluster: LocalCluster,
) -> None:
    fresh_cluster.add_bookie()  # a spare to replace the lost one
    async with await aio.connect(fresh_cluster.metadata_uri) as client:
        ledgers = []
        for _ in range(2):
            writer = await client.create_ledger(3, 3, 2)
            await writer.append(b"kept")
            await writer.close()
            ledgers.append(writer.ledger_id)
        ensembles = [set((await client.ledger_metadata(i)).last_ensemble) for i in ledgers]
        lost = sorted(ensembles[0] & ensembles[1])[0]
        fresh_cluster.stop(lost)
        port = free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        command = [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "autorecovery"]
        command += ["--interval", "0.5"]
        command += ["--lost-after", "2", "--metrics-listen", f"127.0.0.1:{port}"]
        command += ["--metadata", fresh_cluster.metadata_uri]
        daemon = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.DEVNULL)
        try:
            seen: list[dict[str, float]] = []

            async def counted(want: float) -> None:
                samples = await asyncio.to_thread(_scrape, url)
                seen.append(samples)
                assert samples.get("walog_autorecovery_underreplicated_ledgers") == want

            # Before --lost-after the bookie is missing but not repaired: both ledgers count.
            await eventually(lambda: counted(2), within=30)
            await eventually(lambda: counted(0), within=60)
            last = seen[-1]
            assert last["walog_autorecovery_repaired_fragments_total"] == 2
            assert last["walog_autorecovery_missing_bookies"] == 0
            assert last["walog_autorecovery_passes_total"] >= 2
        finally:
            daemon.send_signal(signal.SIGTERM)
            await asyncio.wait_for(daemon.wait(), 60)
        assert daemon.returncode == 0
