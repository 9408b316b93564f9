"""The stored tail rule (walog/ledger/tail.py): the highest entry covering answers show,
never below the entry before the last fragment."""

from __future__ import annotations

from walog.ledger.tail import tail_of
from walog.metadata.layout import LedgerMetadata
from walog.transport.base import ReadLacReply, StoredEntry
from walog.wire.status import Status


def metadata(*firsts: int) -> LedgerMetadata:
    ensembles = tuple((first, ("b0", "b1", "b2")) for first in firsts)
    return LedgerMetadata(1, 3, 3, 2, ensembles=ensembles)


def reply(last: int, lac: int = -1, with_entry: bool = True) -> ReadLacReply:
    entry = StoredEntry(1, last, lac, b"data%d" % last) if with_entry and last >= 0 else None
    return ReadLacReply(Status.OK, lac, last, entry)


def test_the_tail_is_the_highest_entry_any_answering_bookie_stores() -> None:
    tail = tail_of(metadata(0), [reply(3, lac=2), reply(5, lac=3), reply(4)])
    assert tail.entry_id == 5
    assert tail.entry is not None and tail.entry.data == b"data5"


def test_the_tail_is_never_before_the_last_fragment() -> None:
    # Entries before a fragment were complete when it began, whatever its bookies hold.
    tail = tail_of(metadata(0, 10), [reply(-1), ReadLacReply(Status.NO_SUCH_LEDGER)])
    assert (tail.entry_id, tail.entry) == (9, None)


def test_a_bookie_without_the_entry_data_still_raises_the_tail() -> None:
    tail = tail_of(metadata(0), [reply(2), reply(7, with_entry=False)])
    assert (tail.entry_id, tail.entry) == (7, None)
    # An answer with the same entry and its data is preferred.
    tail = tail_of(metadata(0), [reply(7, with_entry=False), reply(7)])
    assert tail.entry is not None and tail.entry.entry_id == 7


def test_an_empty_ledger_has_no_tail() -> None:
    assert tail_of(metadata(0), [reply(-1), reply(-1)]).entry_id == -1


def test_the_tail_carries_the_highest_lac_an_answer_showed_a_bookies_own_or_its_entrys() -> None:
    # b0 knows LAC 4 (an explicit LAC), b1's last entry 5 carries LAC 4, b2 knows 2.
    tail = tail_of(metadata(0), [reply(5, lac=4), reply(4, lac=2), reply(3, lac=2)])
    assert (tail.entry_id, tail.lac) == (5, 4)
    # The bookie knows LAC 1 only; the last entry it stores carries LAC 5.
    carried = ReadLacReply(Status.OK, 1, 6, StoredEntry(1, 6, 5, b"data6"))
    assert tail_of(metadata(0), [carried, reply(5, lac=1)]).lac == 5
    assert tail_of(metadata(0), [ReadLacReply(Status.NO_SUCH_LEDGER)]).lac == -1
