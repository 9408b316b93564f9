"""The public API matches its reference, docs/api.md: names, methods, signatures.

The reference's bullets start with the API they describe in backquotes, before the dash:
``walog.connect(metadata_uri, *, timeout=10.0, ...) -> Client`` (a callable, with its
parameters and defaults as Python writes them; ``=...`` is a default computed at call time),
``name: type`` (an attribute), or ``walog.NoSuchLedgerError`` (a name). Under a heading
that names a class (``## `walog.Client` ``) the names are that class's members.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import walog

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "api.md"

# The handles a user calls: each of their public methods and attributes is in the reference.
HANDLES = ["Client", "LedgerWriter", "LedgerReader", "Log", "LogWriter", "LogReader"]

_CALL = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?P<params>\(.*\))?(?: -> .+)?$")
_ATTRIBUTE = re.compile(r"^(?P<name>[a-z_]\w*): .+$")


class Item(NamedTuple):
    """One API entry of the reference."""

    section: str
    dotted: str  # without the leading "walog."
    params: str | None  # "(a, b=1)" for callables, None otherwise


@functools.cache
def _items() -> list[Item]:
    items: list[Item] = []
    section, owner = "", ""
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:]
            named = re.fullmatch(r"`walog\.([\w.]+)`", section)
            owner = named.group(1) if named else ""
            continue
        if not line.startswith("- `"):
            continue
        head = line[2:].split(" — ", 1)[0]
        for code in re.findall(r"`([^`]+)`", head):
            attribute = _ATTRIBUTE.match(code)
            call = _CALL.match(code)
            if attribute and owner:
                items.append(Item(section, f"{owner}.{attribute['name']}", None))
            elif call and call["name"].startswith("walog."):
                items.append(Item(section, call["name"][len("walog.") :], call["params"]))
            elif call and owner:
                items.append(Item(section, f"{owner}.{call['name']}", call["params"]))
            else:
                pytest.fail(f"docs/api.md: cannot read {code!r} in section {section!r}")
    return items


def _resolve(dotted: str) -> Any:
    """``walog.<dotted>``, attribute by attribute."""
    value: Any = walog
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _has_member(cls: type, name: str) -> bool:
    """A method, property or field of ``cls`` (dataclass and NamedTuple fields included)."""
    fields = getattr(cls, "__dataclass_fields__", None) or getattr(cls, "_fields", ())
    return hasattr(cls, name) or name in fields


def _ids(items: list[Item]) -> list[str]:
    return [item.dotted for item in items]


def test_reference_is_read() -> None:
    # Guards the reader above: if the page's layout changes, the reader must follow.
    dotted = set(_ids(_items()))
    assert {"connect", "aio.connect", "Client.create_ledger", "Log.open_writer"} <= dotted
    assert {"LedgerWriter.ledger_id", "Position.parse", "testing.LocalCluster.kill"} <= dotted
    assert sum(item.section == "Errors" for item in _items()) >= 10


def test_every_public_name_is_in_the_reference() -> None:
    documented = {item.dotted.split(".")[0] for item in _items()}
    assert set(walog.__all__) - documented == set(), "public names missing from docs/api.md"


@pytest.mark.parametrize("item", _items(), ids=_ids(_items()))
def test_reference_entry_exists(item: Item) -> None:
    owner, _, member = item.dotted.rpartition(".")
    assert item.dotted.split(".")[0] in walog.__all__, f"walog.{item.dotted}: not exported"
    if owner and inspect.isclass(parent := _resolve(owner)):
        assert _has_member(parent, member), f"walog.{item.dotted} does not exist"
    else:
        _resolve(item.dotted)


@pytest.mark.parametrize("cls", HANDLES)
def test_every_method_of_a_handle_is_in_the_reference(cls: str) -> None:
    documented = {
        item.dotted.split(".", 1)[1] for item in _items() if item.dotted.startswith(f"{cls}.")
    }
    public = {name for name in dir(_resolve(cls)) if not name.startswith("_")}
    assert public - documented == set(), f"members of walog.{cls} missing from docs/api.md"


def _default(node: ast.expr) -> Any:
    """A default as the reference writes it, evaluated among the public names."""
    if isinstance(node, ast.Constant) and node.value is ...:
        return ...
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return eval(  # the reference's own text, read from the repository
        compile(ast.Expression(node), "docs/api.md", "eval"),
        {"__builtins__": {}},
        {name: _resolve(name) for name in names},
    )


def _documented_parameters(params: str) -> list[tuple[str, inspect._ParameterKind, Any]]:
    """(name, kind, default) per parameter of ``(params)``; a missing default is ``empty``."""
    function = ast.parse(f"def f{params}: ...").body[0]
    assert isinstance(function, ast.FunctionDef)
    args = function.args
    out: list[tuple[str, inspect._ParameterKind, Any]] = []
    positional = args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults, strict=True):
        value = inspect.Parameter.empty if default is None else _default(default)
        out.append((arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, value))
    if args.vararg:
        out.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.empty))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        value = inspect.Parameter.empty if kw_default is None else _default(kw_default)
        out.append((arg.arg, inspect.Parameter.KEYWORD_ONLY, value))
    if args.kwarg:
        out.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD, inspect.Parameter.empty))
    return out


_CALLABLES = [item for item in _items() if item.params is not None]


@pytest.mark.parametrize("item", _CALLABLES, ids=_ids(_CALLABLES))
def test_reference_signature_is_the_code_signature(item: Item) -> None:
    assert item.params is not None
    target = _resolve(item.dotted)
    actual = [
        (p.name, p.kind, p.default)
        for p in inspect.signature(target).parameters.values()
        if p.name != "self"
    ]
    documented = _documented_parameters(item.params)
    where = f"walog.{item.dotted} in docs/api.md"
    assert [p[:2] for p in documented] == [p[:2] for p in actual], f"{where}: parameters differ"
    for (name, _, default), (_, _, real) in zip(documented, actual, strict=True):
        if default is ...:
            assert real is not inspect.Parameter.empty, f"{where}: {name} has no default"
        else:
            assert default == real, f"{where}: {name} defaults to {real!r}, not {default!r}"


_ERRORS = [item for item in _items() if item.section == "Errors"]


@pytest.mark.parametrize("item", _ERRORS, ids=_ids(_ERRORS))
def test_reference_error_is_a_walog_error(item: Item) -> None:
    assert issubclass(_resolve(item.dotted), walog.WalogError)


def test_writer_fenced_error_is_a_ledger_fenced_error() -> None:
    assert issubclass(walog.WriterFencedError, walog.LedgerFencedError)


def test_durability_default_is_persistent() -> None:
    params = inspect.signature(walog.Client.create_ledger).parameters
    assert params["durability"].default == walog.Durability.PERSISTENT


def test_position_round_trips_through_str() -> None:
    position = walog.Position(7, 42, 3)
    assert str(position) == "7:42:3"
    assert walog.Position.parse(str(position)) == position
    assert walog.Position(7, 42, 3) < walog.Position(7, 43, 0) < walog.Position(8, 0, 0)
    assert len({position, walog.Position(7, 42, 3)}) == 1
