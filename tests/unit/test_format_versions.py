"""The client's formats: a newer version is refused with one error naming both versions;
older versions stay readable (docs/compatibility.md)."""

from __future__ import annotations

import json
import re

import pytest

from walog.errors import NewerFormatError
from walog.format_versions import check_version
from walog.log.log_metadata import LOG_FORMAT, LogMetadata
from walog.log.records import (
    TAGGED_FORMAT_VERSION,
    RecordFormatError,
    decode_records,
    encode_records,
)
from walog.log.registration import WRITER_RECORD_FORMAT, WriterInfo
from walog.metadata.election import leader_of
from walog.metadata.layout import (
    BOOKIE_RECORD_FORMAT,
    DECOMMISSION_MARK_FORMAT,
    LEDGER_FORMAT,
    REPAIR_RECORD_FORMAT,
    LedgerMetadata,
    decommission_mark,
    registered_max_entry_bytes,
    registered_rack,
    repair_doc,
    repair_record,
)
from walog.wire.frames import HELLO_MAGIC, NATIVE_VERSION, hello_version


def _both(found: int, known: int) -> str:
    return re.escape(f"has format version {found}; this walog reads up to {known}: upgrade")


def _ledger_doc() -> dict[str, object]:
    metadata = LedgerMetadata(7, 3, 2, 2, ensembles=((0, ("a:1", "b:1", "c:1")),), ctime=1.0)
    doc: dict[str, object] = json.loads(metadata.to_json())
    return doc


def test_a_newer_ledger_metadata_version_is_refused_naming_both_versions() -> None:
    doc = _ledger_doc()
    doc.update(format=LEDGER_FORMAT + 1, a_field_of_the_next_format=1)
    with pytest.raises(NewerFormatError, match="ledger 7's metadata " + _both(2, 1)):
        LedgerMetadata.from_json(json.dumps(doc).encode())


def test_a_ledger_record_without_a_format_reads_as_version_1() -> None:
    doc = _ledger_doc()
    expected = LedgerMetadata.from_json(json.dumps(doc).encode())
    del doc["format"]
    assert LedgerMetadata.from_json(json.dumps(doc).encode()) == expected


def test_a_newer_log_record_version_is_refused_naming_both_versions() -> None:
    doc = json.loads(LogMetadata().to_json())
    doc["format"] = LOG_FORMAT + 1
    with pytest.raises(NewerFormatError, match="log 'orders''s record " + _both(2, 1)):
        LogMetadata.from_json(json.dumps(doc).encode(), "orders")
    assert LogMetadata.from_json(LogMetadata().to_json(), "orders") == LogMetadata()


def test_a_newer_writer_registration_version_is_refused_naming_both_versions() -> None:
    info = WriterInfo("host-a", 42, 3, 1.0)
    doc = json.loads(info.to_json())
    assert doc["format"] == WRITER_RECORD_FORMAT
    assert WriterInfo.from_json(info.to_json()) == info
    del doc["format"]
    assert WriterInfo.from_json(json.dumps(doc).encode()) == info  # version 1
    doc["format"] = WRITER_RECORD_FORMAT + 1
    with pytest.raises(NewerFormatError, match=_both(2, 1)):
        WriterInfo.from_json(json.dumps(doc).encode())


def test_a_newer_bookie_registration_version_is_refused_naming_both_versions() -> None:
    doc = {"bookie_id": "10.0.0.1:3181", "rack": "r1", "max_entry_bytes": 1024}
    assert registered_rack(json.dumps(doc).encode()) == "r1"  # version 1: no format field
    doc["format"] = BOOKIE_RECORD_FORMAT + 1
    raw = json.dumps(doc).encode()
    named = "bookie 10.0.0.1:3181's registration "
    with pytest.raises(NewerFormatError, match=named + _both(2, 1)):
        registered_rack(raw)
    with pytest.raises(NewerFormatError, match=_both(2, 1)):
        registered_max_entry_bytes(raw)


def test_a_newer_log_entry_version_is_refused_naming_both_versions() -> None:
    records = [(1.0, b"a"), (2.0, b"b")]
    entry = bytearray(encode_records(records))
    assert decode_records(bytes(entry)) == records
    entry[0] = TAGGED_FORMAT_VERSION + 1
    with pytest.raises(RecordFormatError, match=_both(3, 2)):
        decode_records(bytes(entry))


def test_a_newer_native_hello_is_told_apart_from_a_foreign_one() -> None:
    assert hello_version(HELLO_MAGIC + b"token") == (NATIVE_VERSION, b"token")
    assert hello_version(b"walog-native/2\n") == (2, b"")
    assert hello_version(b"GET / HTTP/1.1\r\n") is None
    assert hello_version(b"walog-native/x\n") is None


def test_a_version_no_walog_writes_is_damage_not_a_newer_format() -> None:
    for found in (0, -1, "2", None, True):
        with pytest.raises(ValueError, match="which no walog writes") as caught:
            check_version("a record", found, 1, ValueError, newer=NewerFormatError)
        assert not isinstance(caught.value, NewerFormatError)


def test_repair_records_and_decommission_marks_are_written_with_their_format() -> None:
    assert repair_doc(repair_record(lost=["a:1"]), 7) == {
        "format": REPAIR_RECORD_FORMAT,
        "lost": ["a:1"],
    }
    assert repair_doc(b'{"damaged_on": ["a:1"]}', 7) == {"damaged_on": ["a:1"]}  # version 1
    mark = json.loads(decommission_mark("a:1", 5.0))
    assert mark == {"format": DECOMMISSION_MARK_FORMAT, "bookie_id": "a:1", "since": 5.0}


def test_a_damaged_repair_or_leader_record_is_damage_not_a_newer_format() -> None:
    for raw in (b"{not json", b"[1]", b'{"format": 0}', b'{"format": "2"}'):
        with pytest.raises(ValueError, match="ledger 7's repair record") as caught:
            repair_doc(raw, 7)
        assert not isinstance(caught.value, NewerFormatError)
        with pytest.raises(ValueError) as caught:
            leader_of(raw, "svc")
        assert not isinstance(caught.value, NewerFormatError)
    with pytest.raises(ValueError, match="election 'svc''s leader record is damaged"):
        leader_of(b'{"candidate": "a"}', "svc")
