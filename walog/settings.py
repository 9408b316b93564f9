"""A setting of a walog program, declared once: its name, unit, default and help text.

Settings kept in dataclasses (the bookie's ``StorageConfig``, ``CompactionPolicy``,
``DiskThresholds``) declare their default and help text with :func:`setting`; a dataclass
that passes them on (``BookieConfig``) takes both over with :func:`same_as` instead of
restating them, under the same name, and builds the owner back with :func:`owned`. Units
are in the names: ``_s`` seconds (a number), ``_bytes`` bytes (an integer, or a size such
as ``"64MiB"`` where the flag takes one). A setting's flag is its name spelled with dashes
(:func:`flag_of`); a flag renamed stays a while as a hidden, deprecated alias
(:func:`add_deprecated_flag`). walog/config_file.py reads the same settings from a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

HELP = "help"
"""Key of a setting's help text in its dataclass field's metadata."""
OWNER = "owner"
"""Key of the dataclass a setting taken over with :func:`same_as` belongs to."""


def setting(default: Any = dataclasses.MISSING, *, help: str, **extra: Any) -> Any:
    """A dataclass field declaring a setting: its default and its help text, the one place
    either is written (flags, ``--help``, example files and derived dataclasses read them).

    Args:
        default: the default; leave out for a setting that must be given.
        help: what the setting does, as ``--help`` shows it (units are in the name).
        extra: more metadata for the program that shows it (e.g. its ``--help`` group).
    """
    return dataclasses.field(default=default, metadata={HELP: help, **extra})


def same_as(owner: type, name: str, **extra: Any) -> Any:
    """A dataclass field for the setting ``name`` of the dataclass ``owner``, with its
    default and help text; the field must be called ``name`` too (:func:`owned` checks).

    Args:
        owner: the dataclass that declares the setting with :func:`setting`.
        name: the setting's name there.
        extra: more metadata, e.g. the ``--help`` group it is shown in.
    """
    field = _fields(owner)[name]
    metadata = {**field.metadata, OWNER: owner, "name": name, **extra}
    if field.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=field.default_factory, metadata=metadata)
    return dataclasses.field(default=field.default, metadata=metadata)


def owned(settings: Any, owner: type) -> dict[str, Any]:
    """The values of the settings of dataclass instance ``settings`` taken over from
    ``owner`` with :func:`same_as`, by name: the keyword arguments to build an ``owner``.

    Raises:
        TypeError: a field is not named like the setting it takes over.
    """
    values: dict[str, Any] = {}
    for field in dataclasses.fields(settings):
        if field.metadata.get(OWNER) is owner:
            if field.metadata["name"] != field.name:
                raise TypeError(
                    f"{type(settings).__name__}.{field.name} takes over "
                    f"{owner.__name__}.{field.metadata['name']}: one setting, one name"
                )
            values[field.name] = getattr(settings, field.name)
    return values


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {field.name: field for field in dataclasses.fields(cls)}


def flag_of(name: str) -> str:
    """The flag of a setting: ``group_wait_s`` -> ``--group-wait-s``."""
    return "--" + name.replace("_", "-")


def with_flag_names(message: str, names: Iterable[str]) -> str:
    """``message`` with each setting of ``names`` it mentions (``group_wait_s``, also as
    ``StorageConfig.group_wait_s``) spelled as its flag, for the user of a program."""
    for name in sorted(names, key=len, reverse=True):
        message = re.sub(rf"(?<![\w-])(?:[A-Z]\w*\.)?{name}(?!\w)", flag_of(name), message)
    return message


# -- flags -------------------------------------------------------------------------------------


class DeprecatedFlag(argparse.Action):
    """An old spelling of a flag, hidden from ``--help``: it sets the new flag's setting
    (converted where the unit changed) and warns on stderr.

    Args:
        replacement: the flag to use instead.
        convert: turns the old flag's value into the new one's (a unit change), if needed.
    """

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        replacement: str,
        convert: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["help"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kwargs)
        self.replacement = replacement
        self.convert = convert

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        """Store the value under the new flag's setting and warn."""
        print(
            f"{parser.prog}: warning: {option_string} is deprecated; use {self.replacement}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, self.convert(values) if self.convert else values)


def add_deprecated_flag(
    parser: argparse.ArgumentParser,
    old: str,
    new: str,
    convert: Callable[[Any], Any] | None = None,
) -> None:
    """Keep ``old`` working as a hidden alias of the flag ``new`` (see :class:`DeprecatedFlag`);
    it is no key of a configuration file."""
    action = next(a for a in parser._actions if new in a.option_strings)
    typed: dict[str, Any] = {"type": action.type} if action.type is not None else {}
    parser.add_argument(
        old,
        dest=action.dest,
        **typed,
        metavar=action.metavar,
        action=DeprecatedFlag,
        replacement=new,
        convert=convert,
    )


__all__ = [
    "HELP",
    "OWNER",
    "DeprecatedFlag",
    "add_deprecated_flag",
    "flag_of",
    "owned",
    "same_as",
    "setting",
    "with_flag_names",
]
