"""The log writer's per-record path, compiled (walog/log/_fastrecords.c) and pure Python
(:class:`walog.log.records.RecordBatch`, :class:`~walog.log.records.TaggedRecordBatch`,
``walog.log.position._resolve_positions_python``): the same answers, errors and bytes for
any sequence of calls.

The compiled module must be built here (``pip install -e .``): these tests fail, not skip,
when it is not. The other tests run whichever code was selected (``WALOG_PURE_PYTHON=1``
picks pure Python).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import importlib
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walog._sinks import ALREADY_SETTLED
from walog.log import position, records
from walog.log.position import Position, _resolve_positions_python
from walog.log.records import RecordBatch, TaggedRecordBatch, producer_prefix


def compiled() -> ModuleType:
    """The compiled module; the calling test fails with one line when it is not built."""
    try:
        return importlib.import_module("walog.log._fastrecords")
    except ImportError as exc:
        pytest.fail(f"walog.log._fastrecords is not built ({exc}): pip install -e .")


def outcome(call: Any, *args: Any) -> tuple[str, Any]:
    """What ``call(*args)`` returns, or the type of what it raises."""
    try:
        return "returned", call(*args)
    except Exception as exc:
        return "raised", type(exc)


def state(batch: Any) -> tuple[Any, ...]:
    """Everything a batch tells about itself."""
    return (
        batch.count,
        len(batch),
        batch.size,
        batch.version,
        batch.max_payload_bytes,
        batch.payload_bytes,
        batch.full,
        outcome(batch.encode),
    )


prefixes = st.sampled_from(
    [producer_prefix("p"), producer_prefix("svc-7" * 10), producer_prefix("n" * 255)]
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("fits"), st.integers(0, 300)),
        st.tuples(st.just("fits_tagged"), st.integers(0, 300), prefixes),
        st.tuples(
            st.just("add"),
            st.floats(allow_nan=False, allow_infinity=False) | st.integers(0, 2**40),
            st.binary(max_size=200),
        ),
        st.tuples(
            st.just("add_tagged"),
            st.floats(allow_nan=False, allow_infinity=False),
            st.binary(max_size=200),
            prefixes,
            st.integers(0, 2**63 - 1),
        ),
        st.tuples(st.just("max_tagged_payload_bytes"), prefixes),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    max_bytes=st.integers(18, 3000),
    max_records=st.integers(1, 30),
    version=st.sampled_from([1, 2]),
    calls=operations,
)
def test_the_compiled_batch_answers_and_encodes_as_the_pure_python_one(
    max_bytes: int, max_records: int, version: int, calls: list[tuple[Any, ...]]
) -> None:
    pure_type = RecordBatch if version == 1 else TaggedRecordBatch
    pure, fast = (
        pure_type(max_bytes, max_records),
        compiled().Batch(max_bytes, max_records, version),
    )
    for name, *args in calls:
        # add() is called only after fits() said yes, as the writer does.
        if name == "add" and not pure.fits(len(args[1])):
            continue
        if name == "add_tagged" and not pure.fits_tagged(len(args[1]), args[2]):
            continue
        assert outcome(getattr(fast, name), *args) == outcome(getattr(pure, name), *args), name
        assert state(fast) == state(pure)


@pytest.mark.parametrize(
    ("max_bytes", "max_records"), [(17, 5), (2**32 + 18, 5), (1000, 0), (1000, -1)]
)
def test_the_compiled_batch_refuses_the_limits_the_pure_python_one_refuses(
    max_bytes: int, max_records: int
) -> None:
    with pytest.raises(ValueError) as pure:
        RecordBatch(max_bytes, max_records)
    with pytest.raises(ValueError) as fast:
        compiled().Batch(max_bytes, max_records, 1)
    assert str(fast.value) == str(pure.value)


def test_new_batch_gives_the_compiled_batch_unless_pure_python_is_asked() -> None:
    made = records.new_batch(1000, 10, 2)
    assert isinstance(made, compiled().Batch) == records.COMPILED
    assert made.version == 2
    with pytest.raises(ValueError, match="must be 1 or 2, got 3"):
        records.new_batch(1000, 10, 3)


class Refusing:
    """A sink whose set_result raises something other than 'already settled'."""

    def done(self) -> bool:
        return False

    def set_result(self, result: object) -> None:
        raise RuntimeError("refused")

    def set_exception(self, exception: BaseException) -> None:
        raise AssertionError


def _sinks(loop: asyncio.AbstractEventLoop) -> list[Any]:
    cancelled: asyncio.Future[Position] = loop.create_future()
    cancelled.cancel()
    done_already: concurrent.futures.Future[Position] = concurrent.futures.Future()
    done_already.set_result(Position(9, 9, 9))
    return [loop.create_future(), cancelled, concurrent.futures.Future(), done_already]


def test_resolve_gives_each_slot_its_position_and_passes_over_cancelled_sinks() -> None:
    loop = asyncio.new_event_loop()
    try:
        pure, fast = _sinks(loop), _sinks(loop)
        _resolve_positions_python(pure, 7, 3)
        compiled().resolve(fast, 7, 3, Position, ALREADY_SETTLED)
        for a, b in zip(pure, fast, strict=True):
            assert a.cancelled() == b.cancelled()
            if not a.cancelled():
                assert a.result() == b.result()
                assert type(a.result()) is type(b.result()) is Position
        assert fast[0].result() == Position(7, 3, 0) and fast[2].result() == Position(7, 3, 2)
        # Three ints can form no cycle: the compiled loop keeps its positions out of the
        # garbage collector's passes.
        assert not gc.is_tracked(fast[0].result()) and not gc.is_tracked(fast[2].result())
        assert fast[3].result() == Position(9, 9, 9)
        # Any other error stops the loop and is raised, by both.
        for resolve in (
            lambda s: _resolve_positions_python(s, 1, 1),
            lambda s: compiled().resolve(s, 1, 1, Position, ALREADY_SETTLED),
        ):
            later: concurrent.futures.Future[Position] = concurrent.futures.Future()
            with pytest.raises(RuntimeError, match="refused"):
                resolve([Refusing(), later])
            assert not later.done()
    finally:
        loop.close()


def test_resolve_positions_uses_the_compiled_loop_unless_pure_python_is_asked() -> None:
    assert (position._fast is not None) == records.COMPILED
