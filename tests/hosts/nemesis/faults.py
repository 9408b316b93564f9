"""Carrying out the mixed schedule on a HostCluster: each fault's start and end, and the
heal of everything at the end of the run."""

from __future__ import annotations

import collections
import contextlib
import time
from pathlib import Path

from tests.hosts.nemesis.schedule import Fault, Step
from tests.hosts.nemesis.services import Services
from tests.integration.disks import EioSwitch, fill_to
from walog.errors import WalogError
from walog.testing.hosts import HostCluster
from walog.testing.process import BookieProcess, LocalClusterError
from walog.testing.zookeeper import ZooKeeperError, ZooKeeperNode

FILL_SHARE = 0.97
"""How full ballast makes the small disk: past the bookie's read-only mark (0.95)."""
ZK_LEADER_WAIT_S = 5.0
READY_S = 45.0


class Nemesis:
    """Carries out faults (and takeovers, and the decommission) on the run's cluster.

    Args:
        cluster: the cluster.
        services: the run's processes (takeovers, the decommission, the writer's host).
        disk: the small mount that holds the disk bookie's data directory.
        eio: the switch of the EIO bookie's failing disk.
        eio_host: the host of that bookie.
    """

    def __init__(
        self, cluster: HostCluster, services: Services, disk: Path, eio: EioSwitch, eio_host: str
    ) -> None:
        self.cluster = cluster
        self.services = services
        self.ballast = disk / "ballast"
        self.eio = eio
        self.eio_host = eio_host
        self.log: list[str] = []
        self.done: collections.Counter[str] = collections.Counter()
        self.failed: collections.Counter[str] = collections.Counter()
        self._net: dict[int, tuple[str, ...]] = {}
        """Network faults in force, by schedule order: ("isolate", HOST...) or ("cut", A, B)."""
        self._zk_killed: dict[int, list[int]] = {}
        self._zk_paused: dict[int, list[int]] = {}
        self._eio_on = False
        self.began = time.monotonic()

    def bookie(self, host: str) -> BookieProcess:
        """The bookie on host ``host`` (``b3``)."""
        return self.cluster.bookie(int(host.removeprefix("b")) - 1)

    def step(self, step: Step[Fault]) -> None:
        """Carry out one step; note what happened (a failure is noted, not raised)."""
        fault = step.fault
        try:
            what = self._end(step.order, fault) if step.heal else self._start(step.order, fault)
            if not step.heal:
                self.done[fault.kind] += 1
        except (WalogError, OSError, KeyError) as exc:
            what = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            self.failed[fault.kind] += 0 if step.heal else 1
        stamp = time.monotonic() - self.began
        verb = "end" if step.heal else "start"
        self.log.append(f"t={stamp:7.2f}s {verb:<5} {fault.kind} {fault.target}: {what}")

    def note(self, what: str) -> None:
        """Note a step of the run's end, with its time."""
        self.log.append(f"t={time.monotonic() - self.began:7.2f}s {what}")

    # -- one fault ----------------------------------------------------------------------------

    def _start(self, order: int, fault: Fault) -> str:
        kind, target = fault.kind, fault.target
        if kind == "takeover":
            return self.services.takeover()
        if kind == "decommission":
            return self.services.decommission(self.bookie(target).bookie_id)
        if kind in ("isolate_bookie", "isolate_client", "isolate_rack"):
            hosts = self.cluster.rack_hosts(target) if kind == "isolate_rack" else [target]
            self.cluster.isolate(*hosts)
            self._net[order] = ("isolate", *hosts)
            if kind == "isolate_client":
                self.services.unavailable.add(target)
            return f"isolated {', '.join(hosts)}"
        if kind in ("cut_writer_bookie", "cut_bookie_zk"):
            if kind == "cut_bookie_zk":
                sender, receiver = target.split(">")
            else:
                sender, receiver = self.services.writer_host() or "c1", target
            self.cluster.cut_one_way(sender, receiver)
            self._net[order] = ("cut", sender, receiver)
            return f"dropping what {sender} sends {receiver}"
        if kind == "kill_zk_leader":
            self._zk_killed[order] = [self._kill_zk_leader()]
            return f"killed zk{self._zk_killed[order][0]}"
        if kind == "zk_quorum_loss":
            # Frozen, not killed: ZooKeeper 3.8.0 can lose committed transactions when a
            # majority crashes around a resync (docs/correctness.md), and walog promises
            # nothing past a store that forgets what it acknowledged.
            self._zk_paused[order] = self._pause_zk_majority()
            return f"froze zk{' and zk'.join(map(str, self._zk_paused[order]))}"
        bookie = self.bookie(target)
        if kind == "kill_bookie":
            bookie.kill()
            return "SIGKILL"
        if kind == "pause_bookie":
            bookie.pause()
            return "SIGSTOP"
        if kind == "fill_disk":
            fill_to(self.ballast, FILL_SHARE)
            return f"disk filled to {FILL_SHARE:.0%}"
        if kind == "eio_disk":
            self.eio.on()
            self._eio_on = True
            return "disk answers EIO"
        raise ValueError(f"unknown fault kind {kind!r}")

    def _end(self, order: int, fault: Fault) -> str:
        kind, target = fault.kind, fault.target
        if order in self._net:
            self._heal_network(order)
            self.services.unavailable.discard(target)
            return "healed"
        if order in self._zk_paused:
            ids = self._zk_paused.pop(order)
            for myid in ids:
                self.cluster.ensemble.node(myid).resume()
            return f"thawed zk{' and zk'.join(map(str, ids))}"
        if order in self._zk_killed:
            ids = self._zk_killed.pop(order)
            self.cluster.start_zk(*ids, wait=False)
            return f"started zk{' and zk'.join(map(str, ids))}"
        bookie = self.bookie(target)
        if kind == "kill_bookie":
            bookie.start()
            return "started"
        if kind == "pause_bookie":
            bookie.resume()
            return "SIGCONT"
        if kind == "fill_disk":
            self.ballast.unlink(missing_ok=True)
            return "ballast removed"
        if kind == "eio_disk":
            self.eio.off()
            self._eio_on = False
            # A journal that failed stays failed until a restart (the bookie replays it).
            bookie.kill()
            bookie.start()
            return "disk works again; bookie restarted"
        return "nothing to undo"

    def _zk_leader(self) -> ZooKeeperNode | None:
        """The node that leads now (None when no node leads within ZK_LEADER_WAIT_S)."""
        with contextlib.suppress(ZooKeeperError):
            return self.cluster.ensemble.leader(ZK_LEADER_WAIT_S)
        return None

    def _kill_zk_leader(self) -> int:
        """SIGKILL the leader (any running node when none leads now); its id."""
        victim = self._zk_leader() or next((n for n in self.cluster.zookeepers if n.running), None)
        if victim is None:
            raise KeyError("no ZooKeeper node runs")
        victim.kill()
        return victim.myid

    def _pause_zk_majority(self) -> list[int]:
        """SIGSTOP the leader (when one leads) and more running nodes, two in all; their
        ids."""
        leader = self._zk_leader()
        others = [
            n for n in self.cluster.zookeepers if n is not leader and n.running and not n.paused
        ]
        frozen = ([leader] if leader is not None else []) + others
        for node in frozen[:2]:
            node.pause()
        return [node.myid for node in frozen[:2]]

    def _heal_network(self, order: int) -> None:
        fault = self._net.pop(order)
        if fault[0] == "isolate":
            self.cluster.network.reconnect(*fault[1:])
            return
        # One drop rule cannot be taken back alone: heal all, put the others back.
        self.cluster.heal()
        for other in self._net.values():
            if other[0] == "isolate":
                self.cluster.isolate(*other[1:])
            else:
                self.cluster.cut_one_way(other[1], other[2])

    # -- the end --------------------------------------------------------------------------------

    def heal_all(self, retired: str) -> list[str]:
        """Undo every fault, start what is down, wait until every bookie but ``retired``
        (being decommissioned, read-only, or gone) is registered writable (one that is not
        gets restarted); what went wrong."""
        problems: list[str] = []
        self.cluster.heal()
        self._net.clear()
        self.services.unavailable.clear()
        self.ballast.unlink(missing_ok=True)
        eio_was_on, self._eio_on = self._eio_on, False
        self.eio.off()
        self._zk_killed.clear()
        self._zk_paused.clear()
        for node in self.cluster.zookeepers:
            node.resume()
        try:
            self.cluster.start_zk()
        except ZooKeeperError as exc:
            problems.append(f"ZooKeeper did not form a quorum: {str(exc).splitlines()[0]}")
        if eio_was_on:
            self.bookie(self.eio_host).kill()  # its journal failed: restarted below
        for bookie_id in self.cluster.bookie_ids:
            bookie = self.cluster.bookie(bookie_id)
            if bookie_id == retired:
                continue
            if bookie.paused:
                bookie.resume()
            if not bookie.running:
                bookie.start()
        for bookie_id in self.cluster.bookie_ids:
            if bookie_id == retired:
                continue
            try:
                self.cluster.wait_ready(bookie_id, READY_S)
            except LocalClusterError:
                bookie = self.cluster.bookie(bookie_id)
                bookie.kill()
                bookie.start()
                try:
                    self.cluster.wait_ready(bookie_id, READY_S)
                except LocalClusterError as exc:
                    problems.append(str(exc).splitlines()[0])
                else:
                    self.log.append(f"heal: {bookie_id} restarted to be writable again")
        return problems
