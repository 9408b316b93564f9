"""The settings of walog's programs: from flags, the environment and a TOML file.

A program (``python -m bookie``, ``walog autorecovery``) declares each of its settings once,
as a flag of its argument parser: name, unit, default and help. :func:`resolve` reads the
same settings from three more places, in one order of precedence:

1. a flag on the command line;
2. a ``WALOG_*`` environment variable, for the settings the program gives one
   (``--metadata``: ``WALOG_METADATA``);
3. the TOML file that ``--config FILE`` names: its keys are the flags' names without the
   leading dashes (``--gc-interval-s 30`` is ``gc-interval-s = 30``), all at the top level;
4. the default.

``--print-config`` prints the effective settings as TOML, each followed by where it came
from, and exits 0; settings the program refuses are the usual error instead. Bad input (an
unknown key, a value of the wrong type or out of range) is one line naming the file and the
key, exit status 2 (the parser's ``error``).

The settings themselves, their units and their flags' spellings are declared as
walog/settings.py describes.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import textwrap
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, NoReturn

from walog.settings import DeprecatedFlag

ENV_METADATA = "WALOG_METADATA"
"""The environment variable that names the metadata store where ``--metadata`` is not given."""

_CONFIG_DEST = "config"
_PRINT_DEST = "print_config"
_UNSET: Any = object()
"""Marks a setting no flag on the command line gave."""


class ConfigFileError(ValueError):
    """Settings a program cannot use; the message names the file (or variable) and key."""


# -- flags, file and environment --------------------------------------------------------------


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE`` and ``--print-config`` to a program's parser."""
    group = parser.add_argument_group("configuration file")
    group.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="read settings from this TOML file: its keys are the flags' names without the "
        "dashes; flags and WALOG_* variables given win over it",
    )
    group.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective settings, each with where it came from (flag, "
        "environment, file, default), and exit",
    )


def _key(action: argparse.Action) -> str:
    return next(o for o in action.option_strings if o.startswith("--"))[2:]


def _settings(parser: argparse.ArgumentParser, skip: Iterable[str]) -> list[argparse.Action]:
    """The actions of ``parser`` that are settings (keys of the file), in parser order."""
    left_out = {_CONFIG_DEST, _PRINT_DEST, *skip}
    return [
        action
        for action in parser._actions
        if any(o.startswith("--") for o in action.option_strings)
        and action.help is not argparse.SUPPRESS
        and action.dest not in left_out
        and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
    ]


def _kind(value: object) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _from_file(action: argparse.Action, value: object) -> Any:
    """``value`` of the file, checked and converted as the flag would convert it.

    Raises:
        ValueError: naming what was expected.
    """
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_kind(value)}")
        return value if action.const is True else not value
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {_kind(value)}")
        return [_one_value(action, item) for item in value]
    return _one_value(action, value)


def _one_value(action: argparse.Action, value: object) -> Any:
    kind: Any = action.type
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected {_expected(kind)}, got {_kind(value)}")
    if kind is None or kind is str or (isinstance(kind, type) and issubclass(kind, PurePath)):
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {_kind(value)}")
        converted: Any = value if kind is None else kind(value)
    elif kind is int:
        if not isinstance(value, int):
            raise ValueError(f"expected an integer, got {_kind(value)}")
        converted = value
    elif kind is float:
        if isinstance(value, str):
            raise ValueError(f"expected a number, got {_kind(value)}")
        converted = float(value)
    else:
        try:
            converted = kind(value if isinstance(value, str) else str(value))
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise ValueError(str(exc) or f"bad value {value!r}") from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(repr(c) for c in action.choices)
        raise ValueError(f"expected one of {choices}, got {value!r}")
    return converted


def _expected(kind: object) -> str:
    if kind is int:
        return "an integer"
    if kind is float:
        return "a number"
    if kind is None or kind is str or (isinstance(kind, type) and issubclass(kind, PurePath)):
        return "a string"
    return "a string or a number"


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigFileError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: not a TOML file: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a TOML file: not UTF-8 text") from None


def _unknown_key(
    key: str, path: Path, settings: Sequence[argparse.Action], parser: argparse.ArgumentParser
) -> str:
    keys = [_key(a) for a in settings]
    hint = ""
    for action in parser._actions:
        if isinstance(action, DeprecatedFlag) and f"--{key}" in action.option_strings:
            hint = f" ({action.option_strings[0]} is deprecated: the key is "
            hint += f"{action.replacement[2:]!r})"
    if not hint and key.replace("_", "-") in keys:
        hint = f" (keys are spelled like the flags: {key.replace('_', '-')!r})"
    if not hint:
        close = difflib.get_close_matches(key, keys, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{path}: unknown key {key!r}{hint}"


@dataclasses.dataclass
class Resolved:
    """A program's settings after :func:`resolve`: every value, and where it came from."""

    parser: argparse.ArgumentParser
    """The program's parser (its ``error`` ends the program with status 2)."""
    args: argparse.Namespace
    """Every argument of the parser, settings resolved (what ``parse_args`` would give)."""
    settings: list[argparse.Action]
    """The settings, in the order of the parser."""
    sources: dict[str, str]
    """Where each setting's value came from, by ``dest``: ``flag``, ``environment NAME``,
    ``file`` or ``default``."""
    file: Path | None
    """The file ``--config`` named, if any."""
    secret: frozenset[str] = frozenset()
    """Settings never printed (by ``dest``)."""

    @property
    def print_config(self) -> bool:
        """True when ``--print-config`` was given."""
        return bool(getattr(self.args, _PRINT_DEST, False))

    def values(self) -> dict[str, Any]:
        """The settings' values, by ``dest``."""
        return {action.dest: getattr(self.args, action.dest) for action in self.settings}

    def explain(self, message: str) -> str:
        """``message`` (which names flags) with the file or variable each flag it names took
        its value from, where that was not the command line."""
        notes = []
        for action in self.settings:
            key, source = _key(action), self.sources[action.dest]
            if source in ("flag", "default"):
                continue
            if re.search(rf"(?<![\w-])--{re.escape(key)}(?![\w-])", message):
                where = f"of {self.file}" if source == "file" else f"from the {source}"
                notes.append(f"key {key!r} {where}")
        return f"{message} ({'; '.join(notes)})" if notes else message

    def error(self, message: str) -> NoReturn:
        """End the program with ``message`` (see :meth:`explain`) and exit status 2."""
        self.parser.error(self.explain(message))

    def render(self, title: str) -> str:
        """The effective settings as TOML, each followed by where its value came from."""
        lines = [
            f"# {title}: the effective settings, each followed by where it came from",
            f"# (a flag wins over the environment, which wins over the file {self.file}, "
            "which wins over the default)"
            if self.file
            else "# (a flag wins over the environment, which wins over the default)",
        ]
        for title_of_group, actions in _groups(self.parser, self.settings):
            lines += ["", f"# -- {title_of_group} --"]
            for action in actions:
                key, source = _key(action), self.sources[action.dest]
                value = getattr(self.args, action.dest)
                if action.dest in self.secret:
                    lines.append(f"# {key}: {'set' if value else 'not set'}, not shown  # {source}")
                elif value is None:
                    lines.append(f"# {key}: not set  # {source}")
                else:
                    lines.append(f"{key} = {toml_value(value)}  # {source}")
        return "\n".join(lines) + "\n"


def _groups(
    parser: argparse.ArgumentParser, settings: Sequence[argparse.Action]
) -> list[tuple[str, list[argparse.Action]]]:
    """The settings by the ``--help`` group they are shown in."""
    chosen = set(map(id, settings))
    groups = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if id(a) in chosen]
        if actions:
            groups.append((group.title or "options", actions))
    return groups


def resolve(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    *,
    environment: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    skip: Iterable[str] = (),
    secret: Iterable[str] = (),
) -> Resolved:
    """Parse ``argv`` and fill every setting the command line leaves out from the
    environment, the ``--config`` file or the default, in that order.

    The parser must have the flags of :func:`add_config_flags`. A flag the parser requires
    may come from the environment or the file as well; it is required to be somewhere.
    Bad flags, a bad file or a missing setting end the program through ``parser.error``
    (one line, exit status 2).

    Args:
        parser: the program's parser: its flags are the settings.
        argv: the command line (without the program).
        environment: the environment variable of a setting, by ``dest``.
        environ: the environment (default: ``os.environ``).
        skip: ``dest`` of the flags that are no settings (e.g. a command, ``--rebuild-index``).
        secret: ``dest`` of the settings never printed.
    """
    environ = os.environ if environ is None else environ
    environment = environment or {}
    settings = _settings(parser, skip)
    required = [action for action in settings if action.required]
    namespace = argparse.Namespace()
    for action in settings:
        if not isinstance(action, argparse._AppendAction):  # an append builds on a list
            setattr(namespace, action.dest, _UNSET)
    for action in required:
        action.required = False  # may come from the file or the environment
    try:
        args = parser.parse_args(argv, namespace)
    finally:
        for action in required:
            action.required = True
    path: Path | None = getattr(args, _CONFIG_DEST, None)
    try:
        in_file = _read_file(path) if path is not None else {}
        by_key = {_key(action): action for action in settings}
        for key in in_file:
            if key not in by_key:
                raise ConfigFileError(_unknown_key(key, path or Path(), settings, parser))
        sources: dict[str, str] = {}
        for action in settings:
            key = _key(action)
            given = getattr(args, action.dest)
            if isinstance(action, argparse._AppendAction):
                given = _UNSET if given is action.default else given  # not given: the default
            if given is not _UNSET:
                sources[action.dest] = "flag"
                continue
            variable = environment.get(action.dest)
            if variable and environ.get(variable):
                value: Any = _from_environment(action, variable, environ[variable])
                sources[action.dest] = f"environment {variable}"
            elif key in in_file:
                try:
                    value = _from_file(action, in_file[key])
                except ValueError as exc:
                    raise ConfigFileError(f"{path}: key {key!r}: {exc}") from None
                sources[action.dest] = "file"
            else:
                value = list(action.default) if isinstance(action.default, list) else action.default
                sources[action.dest] = "default"
            setattr(args, action.dest, value)
    except ConfigFileError as exc:
        parser.error(str(exc))
    resolved = Resolved(parser, args, settings, sources, path, frozenset(secret))
    missing = [action for action in required if getattr(args, action.dest) is None]
    if missing:
        flags = ", ".join(f"--{_key(a)}" for a in missing)
        where = f"keys of {path}" if path else "keys of a --config file"
        resolved.error(f"missing settings: {flags} (flags, or {where})")
    return resolved


def _from_environment(action: argparse.Action, variable: str, text: str) -> Any:
    try:
        return _one_value(action, text) if action.type not in (int, float) else action.type(text)
    except ValueError as exc:
        raise ConfigFileError(f"environment {variable}={text!r}: {exc}") from None


def toml_value(value: object) -> str:
    """``value`` (a setting's: bool, number, string, path or list of them) written in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def plain_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text of a setting as ``--help`` shows it, without the ``[default]`` that
    ends it."""
    text = parser._get_formatter()._expand_help(action)
    return re.sub(r"\s*\[[^\[\]]*\]$", "", " ".join(text.split()))


def example_file(
    parser: argparse.ArgumentParser,
    *,
    title: Sequence[str],
    samples: Mapping[str, object],
    hints: Mapping[str, object],
    skip: Iterable[str] = (),
) -> str:
    """A commented TOML file with every setting of ``parser``, each after its help text and
    with its default, which the program reads back as it is.

    Args:
        parser: the program's parser.
        title: the comment lines at the top.
        samples: values to set instead of the default, by key (e.g. the metadata store).
        hints: values to show commented out, by key, for settings off by default (a path).
        skip: ``dest`` of the flags that are no settings.
    """
    lines = [f"# {line}" if line else "#" for line in title]
    for group_title, actions in _groups(parser, _settings(parser, skip)):
        lines += ["", f"# -- {group_title} --"]
        for action in actions:
            key = _key(action)
            lines.append("")
            lines += textwrap.wrap(
                plain_help(parser, action),
                92,
                initial_indent="# ",
                subsequent_indent="# ",
                break_on_hyphens=False,
            )
            if key in samples:
                lines.append(f"{key} = {toml_value(samples[key])}")
            elif action.default is not None:
                lines.append(f"{key} = {toml_value(action.default)}")
            else:
                lines.append(f"# {key} = {toml_value(hints.get(key, ''))}")
    return "\n".join(lines) + "\n"


__all__ = [
    "ENV_METADATA",
    "ConfigFileError",
    "Resolved",
    "add_config_flags",
    "example_file",
    "plain_help",
    "resolve",
    "toml_value",
]
