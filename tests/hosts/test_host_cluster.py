"""The hosts themselves: own addresses, racks, a ZooKeeper quorum, faults that really cut
what they say, heal, and nothing left behind by an owner that was killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import grpc
import pytest

from tests.hosts.conftest import healthy
from tests.integration.disks import wait_until
from tests.processes import DIE_WITH_PARENT
from walog.testing.hosts import HostCluster
from walog.testing.netns import (
    HostNetwork,
    HostNetworkError,
    call_in_namespace,
    check_can_make_hosts,
    list_namespaces,
    sweep_stale,
)
from walog.testing.zookeeper import four_letter_word
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto.bookie_pb2_grpc import BookieStub

REPO_ROOT = Path(__file__).resolve().parents[2]


def _connects(cluster: HostCluster, source: str, bookie_id: str, timeout: float = 1.0) -> bool:
    host, port = bookie_id.rsplit(":", 1)

    def attempt() -> bool:
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except OSError:
            return False
        return True

    return call_in_namespace(cluster.host(source).namespace, attempt)


def _datagram_arrives(cluster: HostCluster, sender: str, receiver: str) -> bool:
    address = cluster.host(receiver).address
    inbox = call_in_namespace(
        cluster.host(receiver).namespace, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    )
    with inbox:
        inbox.bind((address, 0))
        inbox.settimeout(0.5)
        port = inbox.getsockname()[1]

        def send() -> None:
            # A rule dropping output makes the sender's own send fail (EPERM): not sent.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out, suppress(OSError):
                out.sendto(b"ping", (address, port))

        call_in_namespace(cluster.host(sender).namespace, send)
        try:
            return inbox.recv(16) == b"ping"
        except TimeoutError:
            return False


def test_bookies_listen_on_their_own_host_addresses_in_their_racks(hosts: HostCluster) -> None:
    assert len(set(hosts.bookie_ids)) == 6
    for bookie_id in hosts.bookie_ids:
        assert not bookie_id.startswith("127.")
        assert hosts.host(hosts.host_of(bookie_id)).address == bookie_id.rsplit(":", 1)[0]
    assert sorted(hosts.racks.values()) == ["rack-1"] * 2 + ["rack-2"] * 2 + ["rack-3"] * 2
    listing = hosts.popen(
        "c1",
        ["python", "-m", "walog", "bookies", "--metadata", hosts.metadata_uri],
        log=subprocess.PIPE,
    )
    out, _ = listing.communicate(timeout=60)
    assert listing.returncode == 0, out
    rows = {line.split()[0]: line.split()[2] for line in out.decode().splitlines()}
    assert rows == hosts.racks


def test_every_thread_of_the_test_process_reaches_the_hosts(hosts: HostCluster) -> None:
    # Libraries connect on threads of their own, which stay in the machine's namespace
    # (gRPC's event engine reconnects a channel that way): the hosts answer there too, on
    # a new channel and a plain socket from the main thread.
    bookie = hosts.bookie_ids[0]
    with grpc.insecure_channel(bookie) as channel:
        info = BookieStub(channel).Info(pb.InfoRequest(), timeout=30)
    assert info.bookie_id == bookie
    host, port = bookie.rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=5).close()


def test_two_host_networks_at_once_take_different_subnets() -> None:
    first, second = HostNetwork("subnets1"), HostNetwork("subnets2")
    try:
        first.create()
        second.create()
        assert first.subnet != second.subnet
        third = HostNetwork("subnets3", first.subnet)
        with pytest.raises(HostNetworkError, match="held by another host network"):
            third.create()
        assert not _link_exists("wlhsubnets3")  # a failed start leaves nothing behind
        assert third.switch not in list_namespaces()
    finally:
        first.destroy()
        second.destroy()


def test_the_zookeeper_ensemble_has_one_leader_and_a_quorum(hosts: HostCluster) -> None:
    modes = sorted(node.mode() or "down" for node in hosts.zookeepers)
    assert modes == ["follower", "follower", "leader"]


def test_compare_and_set_survives_zookeeper_leader_changes_neither_lost_nor_doubled(
    hosts: HostCluster,
) -> None:
    loop = hosts.popen(
        "c1",
        ["python", "-m", "tests.hosts.cas_loop", hosts.metadata_uri, "/cas-counter", "7"],
        log=subprocess.PIPE,
    )
    try:
        time.sleep(1)  # the loop is under way: the leader dies mid-stream
        first = hosts.kill_zk_leader()
        hosts.zk_leader()  # a new leader serves
        hosts.start_zk(first)
        second = hosts.kill_zk_leader()
        hosts.start_zk(second)
        out, _ = loop.communicate(timeout=60)
    finally:
        healthy(hosts)
    assert loop.returncode == 0, out.decode()[-2000:]
    result = json.loads(out.decode().splitlines()[-1])
    assert result["errors"] == []
    assert result["done"] == result["stored"] > 0


def test_an_isolated_host_reaches_no_one_until_healed(hosts: HostCluster) -> None:
    target = hosts.bookie_ids[0]
    assert _connects(hosts, "c1", target)
    hosts.isolate(hosts.host_of(target))
    try:
        assert not _connects(hosts, "c1", target)
        assert _connects(hosts, "c1", hosts.bookie_ids[1])
    finally:
        hosts.heal()
    assert _connects(hosts, "c1", target, timeout=5.0)


def test_a_one_way_cut_drops_only_what_one_host_sends_the_other(hosts: HostCluster) -> None:
    hosts.cut_one_way("c1", "c2")
    try:
        assert not _datagram_arrives(hosts, "c1", "c2")
        assert _datagram_arrives(hosts, "c2", "c1")
        assert _datagram_arrives(hosts, "c1", "b1")
    finally:
        hosts.heal()
    assert _datagram_arrives(hosts, "c1", "c2")


def test_a_cut_link_separates_two_hosts_and_no_one_else(hosts: HostCluster) -> None:
    hosts.cut("c1", "b1")
    try:
        assert not _datagram_arrives(hosts, "c1", "b1")
        assert not _datagram_arrives(hosts, "b1", "c1")
        assert _datagram_arrives(hosts, "c2", "b1")
    finally:
        healthy(hosts)
    assert _datagram_arrives(hosts, "c1", "b1")


def _ruok_seconds(cluster: HostCluster, source: str) -> float:
    """How long asking zk1 ``ruok`` takes from ``source`` (a new connection)."""

    def ask() -> float:
        started = time.monotonic()
        assert four_letter_word(cluster.zk_node(1).host.address, "ruok", timeout=5) == "imok"
        return time.monotonic() - started

    return call_in_namespace(cluster.host(source).namespace, ask)


def test_a_delayed_host_waits_the_delay_each_way_on_new_connections(hosts: HostCluster) -> None:
    hosts.delay("c1", 60)
    try:
        # The request and its answer each wait 60 ms: 120 ms at least, end to end intact.
        assert _ruok_seconds(hosts, "c1") >= 0.12
        assert _ruok_seconds(hosts, "c2") < 0.12  # other hosts are not delayed
    finally:
        hosts.undelay("c1")
    assert _ruok_seconds(hosts, "c1") < 0.12


def test_namespaces_of_a_killed_owner_are_swept_with_their_processes(tmp_path: Path) -> None:
    script = (
        "import subprocess, sys, time\n"
        "from walog.testing.netns import HostNetwork\n"
        "net = HostNetwork('swept'); net.create(); host = net.add_host('h1')\n"
        "proc = subprocess.Popen([*host.exec_prefix(), 'sleep', '300'])\n"
        "print(proc.pid, flush=True); time.sleep(300)\n"
    )
    owner = subprocess.Popen(
        # DIE_WITH_PARENT: the owner itself never outlives a killed test run.
        [*DIE_WITH_PARENT, sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    assert owner.stdout is not None
    sleeper = int(owner.stdout.readline())
    made = [n for n in list_namespaces() if n.startswith(f"wlh-{owner.pid}-")]
    assert len(made) == 2  # the switch and h1
    assert _link_exists("wlhswept")  # the owner's own plug into the switch
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    swept = sweep_stale()
    assert set(made) <= set(swept)
    assert not [n for n in list_namespaces() if n.startswith(f"wlh-{owner.pid}-")]
    # The kernel removes a veth with its peer's namespace, a little later.
    wait_until(lambda: not _link_exists("wlhswept"), "the owner's veth is gone", within=5)
    wait_until(lambda: not _running(sleeper), "the host's process is gone", within=5)


def _link_exists(name: str) -> bool:
    """Whether the machine's own namespace has a network interface called ``name``."""
    return os.path.exists(f"/sys/class/net/{name}")


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs: a killed process reparented to init stays a zombie until
    init reaps it, which this machine's init does lazily (seconds under load)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_without_root_hosts_fail_with_one_line_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(HostNetworkError, match=r"^network namespaces need root") as failure:
        check_can_make_hosts()
    assert "\n" not in str(failure.value)
    with pytest.raises(HostNetworkError, match="need root"):
        HostNetwork("noroot").create()


def test_walog_local_hosts_runs_racked_bookies_on_hosts_until_sigterm() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    local = subprocess.Popen(
        [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "local", "--hosts", "3", "--racks", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=env,
    )
    try:
        assert local.stdout is not None and local.stderr is not None
        uri = local.stdout.readline().decode().strip()
        assert uri.startswith("zk://10.77."), local.stderr.read().decode()[-2000:]
        banner = local.stderr.readline().decode()
        namespace = banner.split("'ip netns exec ", 1)[1].split()[0]
        listing = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, "-m", "walog", "bookies",
             "--metadata", uri],
            capture_output=True, env=env, cwd=REPO_ROOT, timeout=60, check=False,
        )  # fmt: skip
        assert listing.returncode == 0, listing.stderr.decode()[-2000:]
        racks = sorted(line.split()[2] for line in listing.stdout.decode().splitlines())
        assert racks == ["rack-1", "rack-2", "rack-3"]
        local.send_signal(signal.SIGTERM)
        assert local.wait(60) == 0
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
    assert not [n for n in list_namespaces() if n.startswith(f"wlh-{local.pid}-")]
