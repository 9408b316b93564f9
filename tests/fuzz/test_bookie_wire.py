"""Fuzzing a real bookie process on the wire: it never crashes and keeps serving.

Every example goes to one bookie process (SQLite metadata) shared by this module:

- raw bytes on every unary method and on the add stream (malformed protobuf),
- read / read-LAC / fence requests with absurd ids, reversed, negative and huge ranges,
  negative and huge byte limits, long polls,
- add frames with wrong digests, wrong or malformed master keys, absurd ids and LACs,
  unknown durabilities.

After every example the process must still run and answer ``Info``. Adds the bookie
acknowledged must be well formed with a correct digest; what it serves must carry a digest
that matches its bytes; an entry it refused is never served.

Example counts are modest here; ``--slow`` runs the same properties with many more.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.integration.bookies import Answer, answers, batch_of
from walog.testing import LocalCluster
from walog.wire.digest import MASTER_KEY_BYTES, entry_digest, master_key
from walog.wire.limits import MAX_MESSAGE_BYTES
from walog.wire.packing import ENTRY_HEADER
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

SERVICE = "/walog.bookie.v1.Bookie/"
UNARY = ("Read", "ReadLac", "Fence", "Info", "ListLedgers")
KEY = master_key(b"fuzz")
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ODD_INT64 = st.one_of(st.sampled_from([-(2**63), -1, 0, 1, 2**31, 2**32, 2**62, 2**63 - 1]), INT64)
STORED_LEDGER = 7
STORED_ENTRIES = 12
VALID_STATUSES = set(pb.Status.values())
_ledger_ids = itertools.count(1_000_000)

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))


class Target:
    """The bookie under test and a channel to it."""

    def __init__(self, cluster: LocalCluster, channel: grpc.Channel) -> None:
        self.cluster = cluster
        self.channel = channel
        self.stub = pb_grpc.BookieStub(channel)
        self.refused: dict[tuple[int, int], set[bytes]] = {}
        """Payloads the bookie refused, by (ledger, entry): must never be served."""
        self.acknowledged = 0
        """Hostile-frame adds the bookie acknowledged (shows the accepting path ran)."""

    def raw_unary(self, method: str, body: bytes) -> None:
        """Call ``method`` with ``body`` as the serialized request."""
        call = self.channel.unary_unary(SERVICE + method, None, None)
        try:
            call(body, timeout=10.0)
        except grpc.RpcError as exc:
            _check_refusal(exc)

    def add(self, frames: list[pb.AddFrame]) -> list[Answer]:
        """Send frames on one add stream, half-close, collect the answer to each entry."""
        results: list[Answer] = []
        for response in self.stub.Add(iter(frames), timeout=20.0):
            results.extend(answers(response.results))
        return results

    def check_alive(self) -> None:
        """The process runs and answers."""
        bookie = self.cluster.bookie(0)
        assert bookie.running, f"the bookie died:\n{bookie.log_tail()}"
        info = self.stub.Info(pb.InfoRequest(), timeout=10.0)
        assert info.bookie_id == bookie.bookie_id


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    data_dir = tmp_path_factory.mktemp("fuzz-bookie")
    cluster = LocalCluster(bookies=1, metadata="sqlite", data_dir=data_dir)
    with cluster, cluster.bookie(0).channel() as channel:
        target = Target(cluster, channel)
        adds = [
            _add(STORED_LEDGER, entry_id, f"stored-{entry_id}".encode() * 20, lac=entry_id - 1)
            for entry_id in range(STORED_ENTRIES)
        ]
        results = target.add([_frame(adds)])
        assert [r.status for r in results] == [pb.OK] * STORED_ENTRIES
        yield target
        target.check_alive()
        assert "Traceback" not in _log_text(cluster), "the bookie logged an unexpected error"


def _check_refusal(exc: grpc.RpcError) -> None:
    """Refusing undecodable bytes is fine (grpc's server reports a request it cannot
    deserialize as UNKNOWN "DecodeError"); an unreachable bookie or another error is not."""
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.UNKNOWN:
        assert "DecodeError" in details or "deserializ" in details.lower(), details
    else:
        assert code != grpc.StatusCode.UNAVAILABLE, details


def _log_text(cluster: LocalCluster) -> str:
    return Path(cluster.log_path(0)).read_text(errors="replace")


@dataclasses.dataclass
class HostileAdd:
    """One add as a client may send it, right or wrong; sent as a batch of its own."""

    entry: pb.Entry
    master_key: bytes
    recovery: bool
    durability: int


def _add(
    ledger_id: int,
    entry_id: int,
    data: bytes,
    *,
    lac: int = -1,
    key: bytes = KEY,
    digest: int | None = None,
    durability: int = pb.PERSISTENT,
    recovery: bool = False,
) -> HostileAdd:
    right = entry_digest(ledger_id, entry_id, lac, data)
    entry = pb.Entry(
        ledger_id=ledger_id,
        entry_id=entry_id,
        lac=lac,
        data=data,
        digest=right if digest is None else digest,
    )
    return HostileAdd(entry, key, recovery, durability)


def _frame(adds: list[HostileAdd]) -> pb.AddFrame:
    """A frame with one batch per add."""
    return pb.AddFrame(
        batches=[
            batch_of(
                add.entry.ledger_id,
                [(add.entry.entry_id, add.entry.lac, add.entry.digest, add.entry.data)],
                key=add.master_key,
                durability=add.durability,
                recovery=add.recovery,
            )
            for add in adds
        ]
    )


def _check_served(target: Target, entries: list[pb.Entry], ledger_id: int) -> None:
    for entry in entries:
        assert entry.ledger_id == ledger_id
        assert entry.digest == entry_digest(entry.ledger_id, entry.entry_id, entry.lac, entry.data)
        refused = target.refused.get((entry.ledger_id, entry.entry_id), set())
        assert entry.data not in refused, f"served a refused entry {ledger_id}:{entry.entry_id}"


# -- malformed bytes ---------------------------------------------------------------------


def _raw_bytes_on_every_method(target: Target, method: str, body: bytes) -> None:
    target.raw_unary(method, body)
    target.check_alive()


@FAST
@given(method=st.sampled_from(UNARY), body=st.binary(max_size=300))
def test_malformed_protobuf_on_unary_methods_never_stops_the_bookie(
    target: Target, method: str, body: bytes
) -> None:
    _raw_bytes_on_every_method(target, method, body)


def _raw_frames(target: Target, frames: list[bytes]) -> None:
    call = target.channel.stream_stream(SERVICE + "Add", None, None)
    try:
        for _ in call(iter(frames), timeout=10.0):
            pass
    except grpc.RpcError as exc:
        _check_refusal(exc)
    target.check_alive()


@FAST
@given(frames=st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_malformed_protobuf_on_the_add_stream_never_stops_the_bookie(
    target: Target, frames: list[bytes]
) -> None:
    _raw_frames(target, frames)


# -- absurd reads ------------------------------------------------------------------------

READS = st.builds(
    pb.ReadRequest,
    ledger_id=st.one_of(st.just(STORED_LEDGER), ODD_INT64),
    first_entry_id=st.one_of(st.integers(-2, STORED_ENTRIES + 2), ODD_INT64),
    last_entry_id=st.one_of(st.integers(-2, STORED_ENTRIES + 2), ODD_INT64),
    max_bytes=st.one_of(st.integers(-5, 5000), ODD_INT64),
    previous_lac=ODD_INT64,
    long_poll_timeout_ms=st.one_of(st.just(0), st.integers(-(2**63), 300)),
)


def _absurd_read(target: Target, request: pb.ReadRequest) -> None:
    reply = target.stub.Read(request, timeout=10.0)
    assert reply.status in VALID_STATUSES
    if reply.status == pb.OK and reply.entries:
        ids = [entry.entry_id for entry in reply.entries]
        assert ids == list(range(request.first_entry_id, request.first_entry_id + len(ids)))
        assert ids[-1] <= request.last_entry_id
    _check_served(target, list(reply.entries), request.ledger_id)
    lac = target.stub.ReadLac(pb.ReadLacRequest(ledger_id=request.ledger_id), timeout=10.0)
    assert lac.status in VALID_STATUSES
    if lac.HasField("last_entry"):
        _check_served(target, [lac.last_entry], request.ledger_id)
    target.check_alive()


@FAST
@given(request=READS)
def test_absurd_read_ranges_are_answered_with_a_status_and_valid_entries(
    target: Target, request: pb.ReadRequest
) -> None:
    _absurd_read(target, request)


# -- hostile adds ------------------------------------------------------------------------


FLAWS = ("key", "digest", "durability", "lac", "ids")


@st.composite
def hostile_frames(draw: st.DrawFn) -> tuple[int, list[HostileAdd]]:
    """Adds for a fresh ledger, about half of them wrong in one or more ways (absurd ids,
    LACs outside -1..entry-1, wrong digests, wrong or malformed keys, unknown durability)."""
    ledger_id = next(_ledger_ids)
    entry_ids = draw(st.lists(st.integers(0, 20), min_size=1, max_size=8, unique=True))
    adds: list[HostileAdd] = []
    for entry_id in entry_ids:
        flaws = draw(st.sets(st.sampled_from(FLAWS)) if draw(st.booleans()) else st.just(set()))
        data = draw(st.binary(max_size=64))
        ledger, entry, lac = ledger_id, entry_id, entry_id - 1
        if "ids" in flaws:
            ledger = draw(st.one_of(st.just(ledger_id), ODD_INT64))
            entry = draw(ODD_INT64)
            lac = max(entry - 1, -(2**63))
        if "lac" in flaws:
            lac = draw(ODD_INT64)
        key = KEY
        if "key" in flaws:
            key = draw(st.sampled_from([master_key(b"other"), b"", b"x" * MASTER_KEY_BYTES]))
        digest = None
        if "digest" in flaws:
            digest = draw(st.integers(0, 2**32 - 1))
        durability = draw(st.sampled_from([2, 77])) if "durability" in flaws else pb.PERSISTENT
        if any((a.entry.ledger_id, a.entry.entry_id) == (ledger, entry) for a in adds):
            continue  # results are matched to adds by (ledger, entry): keep them unique
        adds.append(
            _add(
                ledger,
                entry,
                data,
                lac=lac,
                key=key,
                digest=digest,
                durability=durability,
                recovery=draw(st.booleans()),
            )
        )
    assume(adds)
    return ledger_id, adds


def _well_formed(add: HostileAdd) -> bool:
    entry = add.entry
    return (
        entry.ledger_id >= 0
        and entry.entry_id >= 0
        and -1 <= entry.lac < entry.entry_id
        and entry.digest == entry_digest(entry.ledger_id, entry.entry_id, entry.lac, entry.data)
        and len(add.master_key) == MASTER_KEY_BYTES
        and add.durability in (pb.PERSISTENT, pb.VOLATILE)
    )


def _hostile_adds(target: Target, ledger_id: int, adds: list[HostileAdd]) -> None:
    results = target.add([_frame(adds)])
    assert all(result.status in VALID_STATUSES for result in results)
    by_id = {(r.ledger_id, r.entry_id): r.status for r in results}
    accepted = []
    for add in adds:
        where = (add.entry.ledger_id, add.entry.entry_id)
        if by_id.get(where) == pb.OK:
            assert _well_formed(add), f"acknowledged a malformed add: {add}"
            accepted.append((where, add.entry.data))
        elif add.entry.entry_id >= 0 and add.entry.ledger_id >= 0:
            target.refused.setdefault(where, set()).add(add.entry.data)
    for where, data in accepted:  # the same bytes may have been refused in another add
        target.refused.get(where, set()).discard(data)
    target.acknowledged += len(accepted)
    if ledger_id >= 0:
        reply = target.stub.Read(
            pb.ReadRequest(ledger_id=ledger_id, first_entry_id=0, last_entry_id=2**63 - 1),
            timeout=10.0,
        )
        _check_served(target, list(reply.entries), ledger_id)
        for add in adds:
            entry = add.entry
            # Absurd ids may repeat across examples: only the fresh ledger has one writer.
            fresh = entry.ledger_id == ledger_id and entry.entry_id < 2**62
            if fresh and by_id.get((entry.ledger_id, entry.entry_id)) == pb.OK:
                one = target.stub.Read(
                    pb.ReadRequest(
                        ledger_id=ledger_id,
                        first_entry_id=entry.entry_id,
                        last_entry_id=entry.entry_id,
                    ),
                    timeout=10.0,
                )
                assert [e.data for e in one.entries] == [entry.data], "acknowledged entry lost"
    target.check_alive()


@FAST
@given(frame=hostile_frames())
def test_hostile_adds_are_refused_unless_well_formed_and_refused_ones_never_served(
    target: Target, frame: tuple[int, list[HostileAdd]]
) -> None:
    _hostile_adds(target, *frame)


def _garbled_batch(target: Target, blob: bytes) -> None:
    """A batch whose packed entries are arbitrary bytes: refused as a whole (or, were the
    bytes well-formed entries with right digests, stored); nothing of it is ever served
    unless acknowledged, and the bookie keeps serving."""
    ledger_id = next(_ledger_ids)
    batch = pb.AddBatch(batch_id=1, ledger_id=ledger_id, master_key=KEY, entries=blob)
    results = list(target.stub.Add(iter([pb.AddFrame(batches=[batch])]), timeout=20.0))
    statuses = [r.status for response in results for r in response.results]
    assert statuses and all(status in VALID_STATUSES for status in statuses)
    reply = target.stub.Read(
        pb.ReadRequest(ledger_id=ledger_id, first_entry_id=0, last_entry_id=2**63 - 1),
        timeout=10.0,
    )
    if pb.OK not in statuses:
        assert not reply.entries, "served an entry of a refused batch"
    _check_served(target, list(reply.entries), ledger_id)
    target.check_alive()


@FAST
@given(
    blob=st.one_of(
        st.binary(max_size=200),
        # A well-formed header (or several) with a length that runs past the end.
        st.builds(
            lambda entry_id, length, tail: (
                ENTRY_HEADER.pack(entry_id, entry_id - 1, 0, length) + tail
            ),
            st.integers(0, 10),
            st.integers(0, 2**32 - 1),
            st.binary(max_size=50),
        ),
    )
)
def test_garbled_packed_entries_are_refused_and_never_served(target: Target, blob: bytes) -> None:
    _garbled_batch(target, blob)


def test_oversized_entries_and_frames_are_refused_and_the_bookie_keeps_serving(
    target: Target,
) -> None:
    limit = target.stub.Info(pb.InfoRequest(), timeout=10.0).max_entry_bytes
    assert limit > 0
    ledger_id = next(_ledger_ids)
    too_big = _add(ledger_id, 0, b"x" * (limit + 1))
    (result,) = target.add([_frame([too_big])])
    assert result.status == pb.ENTRY_TOO_LARGE and result.max_entry_bytes == limit
    # A frame over the bookie's gRPC message limit is refused by the transport.
    chunk = min(limit, 1 << 20)
    count = MAX_MESSAGE_BYTES // chunk + 2
    huge = _frame([_add(ledger_id, i, b"y" * chunk) for i in range(count)])
    assert huge.ByteSize() > MAX_MESSAGE_BYTES
    with pytest.raises(grpc.RpcError) as refused:
        target.add([huge])
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    ok = target.add([_frame([_add(ledger_id, 0, b"fits")])])
    assert [r.status for r in ok] == [pb.OK]
    target.check_alive()


# -- long variants -----------------------------------------------------------------------


@pytest.mark.slow
@MANY
@given(method=st.sampled_from(UNARY), body=st.binary(max_size=2000))
def test_many_malformed_unary_requests(target: Target, method: str, body: bytes) -> None:
    _raw_bytes_on_every_method(target, method, body)


@pytest.mark.slow
@MANY
@given(request=READS)
def test_many_absurd_reads(target: Target, request: pb.ReadRequest) -> None:
    _absurd_read(target, request)


@pytest.mark.slow
@MANY
@given(frame=hostile_frames())
def test_many_hostile_adds(target: Target, frame: tuple[int, list[HostileAdd]]) -> None:
    _hostile_adds(target, *frame)
