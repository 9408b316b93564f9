"""Writers and readers on client hosts, and the checks over what they acknowledged and read.

A :class:`HostWriter` is :mod:`tests.hosts.writer` running on a client host; reads go
through :mod:`tests.hosts.reader` on another host; :func:`check_readable` holds them against
each other with the chaos history checker (:mod:`tests.chaos.checker`).
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import time
from pathlib import Path

from tests.chaos.checker import Ack, History, ReadRecord, Violation, check
from tests.chaos.records import RecordKey, read_json_lines
from walog.aio import AsyncClient
from walog.log.position import Position
from walog.testing.hosts import HostCluster

Fragment = tuple[int, int, tuple[str, ...]]
"""(ledger id, first entry id, ensemble)."""


class HostWriter:
    """A pipelined writer process on ``host`` appending to ``log`` (see tests.hosts.writer)."""

    def __init__(
        self,
        cluster: HostCluster,
        host: str,
        log: str,
        out_dir: Path,
        incarnation: int = 0,
        rate: float = 300.0,
        roll_entries: int = 400,
        session_timeout: float | None = None,
        writer: int = 0,
    ) -> None:
        self.cluster = cluster
        self.host = host
        self.log = log
        self.out_dir = out_dir
        self.writer = writer
        out_dir.mkdir(parents=True, exist_ok=True)
        self._offset = 0
        self._acks: list[Ack] = []
        self._sent: dict[tuple[int, int], int] = {}
        self._epochs: dict[tuple[int, int], int] = {}
        self.events = out_dir / f"events-{incarnation}.log"
        with self.events.open("ab") as events:
            self.proc = cluster.popen(
                host,
                ["python", "-m", "tests.hosts.writer", cluster.uri(session_timeout), log,
                 str(out_dir),
                 str(incarnation), "--rate", str(rate), "--roll-entries", str(roll_entries),
                 "--writer", str(writer)],
                log=events,
            )  # fmt: skip

    def acks(self) -> list[Ack]:
        """Every append acknowledged so far (from the writer's fsynced ack file)."""
        self._read_new_rows()
        return list(self._acks)

    def sent(self) -> dict[tuple[int, int], int]:
        """Highest sequence number sent, per (writer, incarnation)."""
        self._read_new_rows()
        return dict(self._sent)

    def epochs(self) -> dict[tuple[int, int], int]:
        """The log's epoch each (writer, incarnation) took it over at, once it did."""
        self._read_new_rows()
        return dict(self._epochs)

    def _read_new_rows(self) -> None:
        """Parse what the writer appended since the last call (its whole lines)."""
        path = self.out_dir / f"acks-{self.writer}.jsonl"
        if not path.exists():
            return
        with path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        for line in whole.splitlines():
            row = json.loads(line)
            if "key" in row:
                self._acks.append(Ack(RecordKey.parse(row["key"]), Position.parse(row["pos"])))
            elif "epoch" in row:
                incarnation, epoch = row["epoch"]
                self._epochs[(self.writer, int(incarnation))] = int(epoch)
            else:
                incarnation, seq = row["sent"]
                key = (self.writer, int(incarnation))
                self._sent[key] = max(self._sent.get(key, -1), int(seq))

    def wait_for_more(self, count: int, timeout: float) -> list[Ack]:
        """Wait until ``count`` more appends than now are acknowledged; all acks then.

        Raises:
            AssertionError: the writer exited, or fewer arrived within ``timeout``.
        """
        self._read_new_rows()
        target = len(self._acks) + count
        deadline = time.monotonic() + timeout
        while True:
            self._read_new_rows()
            if len(self._acks) >= target:
                return list(self._acks)
            code = self.proc.poll()
            assert code is None, f"the writer exited ({code}): {self.tail()}"
            assert time.monotonic() < deadline, (
                f"{len(self._acks)} acks, {target} awaited within {timeout:g}s: {self.tail()}"
            )
            time.sleep(0.1)  # the writer is another process; its ack file is polled

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (in-flight appends finish, the writer closes); its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def tail(self) -> str:
        """The end of the writer's event log."""
        return "\n".join(self.events.read_text(errors="replace").splitlines()[-8:])


def read_back(
    cluster: HostCluster, host: str, log: str, end: Position, out: Path
) -> list[ReadRecord]:
    """Read ``log`` from the start through entry ``end`` on ``host`` (a fresh, non-fencing
    reader process); the records.

    Raises:
        AssertionError: the reader failed (with its output).
    """
    out.unlink(missing_ok=True)
    reader = cluster.popen(
        host,
        ["python", "-m", "tests.hosts.reader", cluster.metadata_uri, log, str(end), str(out)],
        log=subprocess.PIPE,
    )  # fmt: skip
    output, _ = reader.communicate(timeout=300)
    assert reader.returncode == 0, f"reader on {host} failed: {output.decode()[-2000:]}"
    return [
        ReadRecord(Position.parse(str(r["pos"])), RecordKey.parse(str(r["key"])), bool(r["intact"]))
        for r in read_json_lines(out)
    ]


def check_readable(acks: list[Ack], reads: list[ReadRecord], end: Position) -> list[Violation]:
    """Violations of: every ack up to ``end`` read back at its position, intact, once, in
    order."""
    return check(History([a for a in acks if a.position <= end], {"reader": reads}))


def fragments(cluster: HostCluster, log: str) -> set[Fragment]:
    """Every fragment of every ledger of ``log``."""

    async def collect(client: AsyncClient) -> set[Fragment]:
        found: set[Fragment] = set()
        for segment in await (await client.open_log(log)).segments():
            metadata = await client.ledger_metadata(segment.ledger_id)
            found |= {(segment.ledger_id, first, tuple(e)) for first, e in metadata.ensembles}
        return found

    return cluster.call(collect)


def rack_crowded(
    cluster: HostCluster, checked: set[Fragment], every: set[Fragment]
) -> list[Fragment]:
    """Fragments of ``checked`` placed against the rack rule: a bookie the fragment placed
    shares its rack with another member although some rack holds none of the ensemble and
    has a bookie the writer could have chosen (with every bookie up, the placement never
    does that).

    A new ledger places its whole first ensemble. A replacement places only the bookies
    that were not in the ledger's fragment before (looked up in ``every``); it keeps the
    others where they are, even two of one rack from a fragment made while a rack was cut
    off, and never chooses a bookie the ledger's writer replaced before."""
    racks = cluster.racks
    crowded = []
    for fragment in sorted(checked):
        ledger_id, first, ensemble = fragment
        counts = collections.Counter(racks[b] for b in ensemble)
        earlier = sorted(f for f in every if f[0] == ledger_id and f[1] < first)
        kept = set(earlier[-1][2]) if earlier else set()
        following = [*earlier[1:], fragment][: len(earlier)]  # each one's successor
        pairs = zip(earlier, following, strict=True)
        replaced = {b for old, new in pairs for b in old[2] if b not in new[2]}
        open_racks = {r for b, r in racks.items() if r not in counts and b not in replaced}
        placed_crowded = any(counts[racks[b]] > 1 for b in ensemble if b not in kept)
        if placed_crowded and open_racks:
            crowded.append(fragment)
    return crowded
