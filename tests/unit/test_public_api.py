"""The public API matches shared/CONTRACT.md: names, classes' methods, key signatures.

CONTRACT.md lives beside the repository (``<repo>/../shared/CONTRACT.md``); without it
these checks are skipped. Every name it lists must resolve.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import walog

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO.parent / "shared" / "CONTRACT.md"

pytestmark = pytest.mark.skipif(
    not CONTRACT.is_file(), reason=f"{CONTRACT} is absent (the contract sits beside the repo)"
)


def _contract() -> str:
    return CONTRACT.read_text() if CONTRACT.is_file() else ""


def _section(title: str) -> str:
    """The text of the ``## title...`` section."""
    match = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## |\Z)", _contract(), re.M | re.S)
    return match.group(1) if match else ""


def _dotted_names() -> list[str]:
    """Every ``walog.X[.Y...]`` the contract mentions, e.g. ``aio.connect``, ``Position``."""
    found = re.findall(r"\bwalog\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)", _contract())
    return sorted(set(found))


def _error_names() -> list[str]:
    """The error classes listed in the "Errors, all subclasses of ..." paragraph."""
    match = re.search(r"^Errors, all subclasses.*?(?=\n\n|\Z)", _contract(), re.M | re.S)
    if not match:
        return []
    return sorted(set(re.findall(r"`(?:walog\.)?(\w+Error)`", match.group(0))))


_HEADING = re.compile(r"^([A-Z]\w*)(?: \(.*?\))?:", re.M)


def _class_methods() -> dict[str, list[str]]:
    """Class name -> method names, from the contract's ``Client:`` / ``Log:`` ... blocks."""
    api = _section("Python API")
    out: dict[str, list[str]] = {}
    headings = list(_HEADING.finditer(api))
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(api)
        block = api[heading.start() : end]
        # A block ends at the first paragraph that is not its bullet list.
        block = re.split(r"\n\n(?!- )", block, maxsplit=1)[0]
        methods = re.findall(r"`(\w+)\(", block)
        out[heading.group(1)] = sorted(set(methods))
    return out


def _resolve(dotted: str) -> Any:
    """``walog.<dotted>``, attribute by attribute."""
    value: Any = walog
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def test_contract_is_parsed() -> None:
    # Guards the parsers above: if CONTRACT.md's layout changes, they must be adapted.
    assert {"connect", "Position", "testing.LocalCluster", "aio.connect"} <= set(_dotted_names())
    assert "LedgerFencedError" in _error_names()
    assert {"Client", "LedgerWriter", "LedgerReader", "Log", "LogWriter", "LogReader"} <= set(
        _class_methods()
    )
    assert "create_ledger" in _class_methods()["Client"]


@pytest.mark.parametrize("dotted", _dotted_names())
def test_contract_name_is_exported_and_resolves(dotted: str) -> None:
    top = dotted.split(".")[0]
    assert top in walog.__all__, f"walog.{top} is in CONTRACT.md but not in walog.__all__"
    _resolve(dotted)


@pytest.mark.parametrize("name", _error_names())
def test_contract_error_is_a_walog_error(name: str) -> None:
    assert name in walog.__all__
    error = _resolve(name)
    assert issubclass(error, walog.WalogError)


def test_writer_fenced_error_is_a_ledger_fenced_error() -> None:
    assert issubclass(walog.WriterFencedError, walog.LedgerFencedError)


@pytest.mark.parametrize("name", sorted(walog.__all__))
def test_every_exported_name_resolves(name: str) -> None:
    _resolve(name)


@pytest.mark.parametrize(
    ("cls", "method"),
    [(cls, method) for cls, methods in sorted(_class_methods().items()) for method in methods],
)
def test_contract_method_exists(cls: str, method: str) -> None:
    assert callable(_resolve(f"{cls}.{method}")), f"walog.{cls}.{method} is not callable"


# (dotted callable, {parameter: default}) as CONTRACT.md states them; `...` = no default.
_SIGNATURES: list[tuple[str, dict[str, Any]]] = [
    ("connect", {"metadata_uri": ..., "timeout": 10.0, "tls": None, "auth_token": None}),
    ("aio.connect", {"metadata_uri": ..., "timeout": 10.0, "tls": None, "auth_token": None}),
    (
        "Client.create_ledger",
        {
            "ensemble_size": 3,
            "write_quorum": 3,
            "ack_quorum": 2,
            "password": b"",
            "custom_metadata": None,
        },
    ),
    ("Client.open_ledger", {"ledger_id": ..., "recovery": True, "password": b""}),
    ("Client.open_log", {"name": ..., "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2}),
    ("Log.open_reader", {"start": "earliest"}),
    ("LogReader.read_next", {"timeout": None}),
    ("RollPolicy", {"max_entries": None, "max_bytes": None, "max_age": None}),
    ("RetentionPolicy", {"max_age": None, "max_bytes": None, "require_archived": False}),
    ("Position", {"ledger_id": ..., "entry_id": ..., "slot": ...}),
    ("testing.LocalCluster", {"bookies": 3, "metadata": "sqlite", "data_dir": None}),
]


@pytest.mark.parametrize(("dotted", "expected"), _SIGNATURES, ids=[s[0] for s in _SIGNATURES])
def test_contract_signature(dotted: str, expected: dict[str, Any]) -> None:
    target = _resolve(dotted)
    params = inspect.signature(target).parameters
    for name, default in expected.items():
        assert name in params, f"walog.{dotted} has no parameter {name!r}"
        actual = params[name].default
        if default is ...:
            assert actual is inspect.Parameter.empty, f"{name} must be required"
        else:
            assert actual == default, f"walog.{dotted}({name}=...) defaults to {actual!r}"


def test_durability_default_is_persistent() -> None:
    params = inspect.signature(_resolve("Client.create_ledger")).parameters
    assert params["durability"].default == walog.Durability.PERSISTENT


def test_position_round_trips_through_str() -> None:
    position_cls = _resolve("Position")
    position = position_cls(7, 42, 3)
    assert str(position) == "7:42:3"
    assert position_cls.parse(str(position)) == position
    assert position_cls(7, 42, 3) < position_cls(7, 43, 0) < position_cls(8, 0, 0)
    assert len({position, position_cls(7, 42, 3)}) == 1


def test_spark_register_resolves() -> None:
    module = importlib.util.find_spec("walog.spark")
    assert module is not None
    _resolve("spark.register")
