"""The sync state machine over real bookies, and ``walog log show`` listing snapshots."""

from __future__ import annotations

import json
import re
import threading
from typing import IO

import pytest

import walog
from walog import main as cli
from walog.log.position import Position, Record
from walog.recipes import NotLeaderError, Role, SnapshotPolicy, StateMachine
from walog.testing import LocalCluster
from walog.wire.durability import Durability


class Balances:
    """Account balances; a transfer that would overdraw fails the same way on every node."""

    def __init__(self) -> None:
        self.accounts: dict[str, int] = {}

    def apply(self, record: Record) -> int:
        op = json.loads(record.data)
        if op["op"] == "deposit":
            self.accounts[op["to"]] = self.accounts.get(op["to"], 0) + op["amount"]
            return self.accounts[op["to"]]
        if self.accounts.get(op["from"], 0) < op["amount"]:
            raise ValueError(f"insufficient funds in {op['from']}")
        self.accounts[op["from"]] -= op["amount"]
        self.accounts[op["to"]] = self.accounts.get(op["to"], 0) + op["amount"]
        return self.accounts[op["from"]]

    def snapshot(self) -> bytes:
        return json.dumps(self.accounts, sort_keys=True).encode()

    def restore(self, data: IO[bytes], position: Position) -> None:
        self.accounts = json.loads(data.read())


def test_sync_commands_from_many_threads_are_applied_once_in_log_order(
    cluster: LocalCluster, log_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name, roll_policy=walog.RollPolicy(max_entries=20))
        service = Balances()
        policy = SnapshotPolicy(every_records=50, keep=1)
        with StateMachine(log, service, node_id="a", snapshot_policy=policy) as machine:
            machine.start()
            machine.wait_leader(timeout=30)
            assert machine.role is Role.LEADER
            machine.execute(json.dumps({"op": "deposit", "to": "x", "amount": 100}).encode())

            def transfers() -> None:
                futures = [
                    machine.submit(
                        json.dumps({"op": "transfer", "from": "x", "to": "y", "amount": 1}).encode()
                    )
                    for _ in range(60)
                ]
                for future in futures:
                    # Overdrawn: applied as a failure on every node, raised to the caller.
                    error = future.exception(timeout=60)
                    assert error is None or isinstance(error, ValueError), error
                    outcomes.append(error is None)

            outcomes: list[bool] = []
            threads = [threading.Thread(target=transfers) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert service.accounts == {"x": 0, "y": 100}
            assert outcomes.count(True) == 100 and outcomes.count(False) == 80
            with pytest.raises(ValueError, match="insufficient funds"):
                machine.execute(
                    json.dumps({"op": "transfer", "from": "x", "to": "y", "amount": 1}).encode()
                )
            info = machine.snapshot_now()
            assert info is not None and info.position == machine.applied_position

            standby_state = Balances()
            with walog.connect(cluster.metadata_uri) as other:
                other_log = other.open_log(log_name)
                with StateMachine(other_log, standby_state, node_id="b") as standby:
                    standby.start()
                    assert standby.role is Role.STANDBY
                    with pytest.raises(NotLeaderError):
                        standby.execute(b"{}")
                    position = machine.applied_position
                    assert position is not None
                    standby.wait_applied(position, timeout=30)
                    assert standby_state.accounts == service.accounts

    capsys.readouterr()
    show = ["log", "show", log_name, "--metadata", cluster.metadata_uri]
    status = cli.main([*show, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    shown = json.loads(out)["snapshots"]
    assert [s["position"] for s in shown] == [str(info.position)]
    assert shown[0]["checksum"] == info.checksum and shown[0]["ledger_id"] == info.ledger_id
    status = cli.main(show)
    out, err = capsys.readouterr()
    assert status == 0, err
    table = out.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["SNAPSHOT", "AT", "STORED", "IN", "BYTES", "CHECKSUM", "NODE"]
    assert table[1].split() == [
        str(info.position),
        "ledger",
        str(info.ledger_id),
        str(info.size_bytes),
        info.checksum,
        "a",
    ]


def test_a_sync_state_machine_refuses_a_volatile_log(cluster: LocalCluster, log_name: str) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name, durability=Durability.VOLATILE)
        refused = rf"log '{re.escape(log_name)}' is VOLATILE: .*durability=Durability.PERSISTENT"
        with pytest.raises(ValueError, match=refused):
            StateMachine(log, Balances(), node_id="a")


def test_wait_leader_on_a_standby_times_out_naming_its_own_timeout(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with (
            StateMachine(log, Balances(), node_id="a") as leader,
            StateMachine(log, Balances(), node_id="b") as standby,
        ):
            leader.start()
            leader.wait_leader(timeout=30)
            standby.start()
            with pytest.raises(TimeoutError) as caught:
                standby.wait_leader(timeout=0.5)
            # The state machine's own deadline, not the facade's (there is none: None).
            assert str(caught.value) == (
                "state machine 'b' did not become the leader within 0.5 seconds (it is standby)"
            )
            assert standby.role is Role.STANDBY and leader.role is Role.LEADER


def test_a_sync_command_retried_with_its_client_id_and_seq_is_applied_once(
    cluster: LocalCluster, log_name: str
) -> None:
    deposit = json.dumps({"op": "deposit", "to": "x", "amount": 5}).encode()
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        service = Balances()
        with StateMachine(log, service, node_id="a") as machine:
            machine.start()
            machine.wait_leader(timeout=30)
            assert machine.execute(deposit, client_id="teller", seq=1) == 5
            assert machine.execute(deposit, client_id="teller", seq=1, timeout=30) == 5
            futures = [machine.submit(deposit, client_id="teller", seq=2) for _ in range(3)]
            assert [f.result(30) for f in futures] == [10, 10, 10]
            assert machine.execute(deposit) == 15
    assert service.accounts == {"x": 15}
