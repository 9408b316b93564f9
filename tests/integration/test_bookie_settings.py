"""A bookie's settings as a real process takes them: from its TOML file alone (``python -m
bookie --config FILE``), refused in one line when the file is bad, and from flags with the
limits both ends of the wire agree on (walog/wire/limits.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc.aio
import pytest

import walog
from tests.integration.bookies import BookieProcess, free_port, make_add, send_frames
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


@pytest.fixture(params=["sqlite", pytest.param("zk", marks=pytest.mark.zk)])
def metadata_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/meta.db"
    zookeeper = request.getfixturevalue("zookeeper")
    return str(zookeeper.uri(f"/bookie-{uuid.uuid4().hex[:12]}", session_timeout=4))


class FileBookie(BookieProcess):
    """A bookie started with ``--config FILE`` and nothing else (the file names the
    process to exit with, so a killed test run leaves no bookie behind)."""

    def __init__(self, config: Path, data_dir: Path, metadata: str, port: int) -> None:
        super().__init__(data_dir, metadata, port=port, exit_with_owner=False)
        self.config = config

    def command(self, extra_args: Sequence[str] = ()) -> list[str]:
        """``python -m bookie --config FILE``."""
        return [sys.executable, "-m", "bookie", "--config", str(self.config), *extra_args]


def test_a_bookie_starts_from_its_toml_file_alone_and_serves(
    metadata_uri: str, tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "bookie.toml"
    config.write_text(
        f'data-dir = "{tmp_path / "bookie"}"\n'
        f'listen = "127.0.0.1:{port}"\n'
        f'metadata = "{metadata_uri}"\n'
        'rack = "rack-from-the-file"\n'
        "exit-with = " + str(os.getpid()) + "\n"
    )
    bookie = FileBookie(config, tmp_path / "bookie", metadata_uri, port)
    try:
        with walog.connect(metadata_uri) as client:
            bookie.start().wait_ready(until=lambda: bookie.bookie_id in client.bookies())
            assert bookie.proc is not None
            assert bookie.proc.args == [sys.executable, "-m", "bookie", "--config", str(config)]
            assert client.bookie_racks() == {bookie.bookie_id: "rack-from-the-file"}
            with client.create_ledger(1, 1, 1) as writer:
                assert writer.append(b"from a file") == 0
                ledger_id = writer.ledger_id
            with client.open_ledger(ledger_id) as reader:
                assert [e.data for e in reader.read(0, 0)] == [b"from a file"]
        assert bookie.terminate() == 0
    finally:
        bookie.stop_quietly()


def test_a_bookie_refuses_a_bad_file_in_one_line_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "bookie.toml"
    config.write_text(f'data-dir = "{tmp_path}"\nlisten = "127.0.0.1:1"\ngc-grace-s = "soon"\n')
    done = subprocess.run(
        [sys.executable, "-m", "bookie", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"python -m bookie: error: {config}: key 'gc-grace-s': expected a number, got a "
        "string (see --help)\n"
    )


async def test_a_bookie_started_from_flags_takes_a_clients_largest_entry_and_no_more(
    tmp_path: Path,
) -> None:
    # The bookie's default is the client's (walog/wire/limits.py), so that a client's
    # largest entry fits, whether the bookie was started from flags, from a file or
    # in-process; one byte more is refused as too large.
    bookie = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db")
    try:
        bookie.start().wait_ready()
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            data = b"x" * DEFAULT_MAX_ENTRY_BYTES
            results, _ = await send_frames(stub, [pb.AddFrame(batches=[make_add(7, 0, data)])])
            assert [r.status for r in results] == [pb.OK]
            over = make_add(7, 1, b"x" * (DEFAULT_MAX_ENTRY_BYTES + 1))
            results, _ = await send_frames(stub, [pb.AddFrame(batches=[over])])
            assert [(r.status, r.max_entry_bytes) for r in results] == [
                (pb.ENTRY_TOO_LARGE, DEFAULT_MAX_ENTRY_BYTES)
            ]
    finally:
        bookie.stop_quietly()
