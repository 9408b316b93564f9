"""No secret ever reaches an output: a ledger's password (nor the hash that checks it), the
ZooKeeper credentials and the bookies' token stay out of the CLI's output, `walog status`,
bookie logs, metrics and exception texts, while everything is used for real."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pytest

import walog
from walog import main as cli
from walog.ledger.create import password_check
from walog.testing import LocalCluster, ZooKeeperServer
from walog.wire.digest import master_key

LEDGER_SECRET = "ledger-pw-7f3a"
ZK_SECRET = "zk-pw-91c2"
TOKEN = "token-5d8e"


def test_secrets_stay_out_of_every_output(
    zookeeper: ZooKeeperServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "zk.auth").write_text(f"walog:{ZK_SECRET}\n")
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "ledger.pw").write_text(LEDGER_SECRET + "\n")
    uri = (
        f"zk://{zookeeper.connect_string}/secrets-{uuid.uuid4().hex[:8]}?session_timeout=4"
        f"&auth_file={tmp_path / 'zk.auth'}"
    )
    hashed = password_check(master_key(LEDGER_SECRET.encode()))
    secrets = (LEDGER_SECRET, ZK_SECRET, TOKEN, hashed)
    args = ["--auth-token-file", str(tmp_path / "token")]
    with LocalCluster(3, metadata=uri, bookie_args=args, metrics=True) as cluster:
        flags = ["--metadata", uri, "--auth-token-file", str(tmp_path / "token")]
        password = ["--password-file", str(tmp_path / "ledger.pw")]
        assert cli.main(["append", "secret-log", "record", *password, *flags]) == 0
        outputs = list(capsys.readouterr())
        with walog.connect(uri, auth_token=TOKEN) as client:
            ledger_id = client.open_log("secret-log").segments()[0].ledger_id
            with pytest.raises(walog.UnauthorizedError) as refused:
                client.open_ledger(ledger_id, password=b"wrong")
            errors = [str(refused.value), repr(client.ledger_metadata(ledger_id))]
        for command in (
            ["ledger", "show", str(ledger_id), "--json", *flags],
            ["ledger", "show", str(ledger_id), *flags],
            ["log", "show", "secret-log", "--json", *flags],
            ["tail", "secret-log", "-n", "1", *password, *flags],
            ["status", "--json", *flags],
            ["status", *flags],
            ["tail", "secret-log", "-n", "1", "--password", "wrong", *flags],
        ):
            cli.main(command)
            captured = capsys.readouterr()
            outputs += [captured.out, captured.err]
        assert json.loads(outputs[2])["ledger_id"] == ledger_id  # the commands really ran
        for index in range(len(cluster.bookie_ids)):
            outputs.append(cluster.bookie(index).log())
            with urllib.request.urlopen(cluster.metrics_url(index) + "/metrics") as response:
                outputs.append(response.read().decode())
    for text in [*outputs, *errors]:
        for secret in secrets:
            assert secret not in text, f"{secret!r} shown in: {text[:300]!r}"
