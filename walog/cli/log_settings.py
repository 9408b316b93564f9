"""The commands on a log's stored settings: ``walog log create`` and ``walog log config``.

Both take settings by the keys of :class:`walog.LogConfig` (``retention.max_age``...):
``log create`` as flags named after them (``--retention-max-age 3600``) or ``--set
KEY=VALUE``, ``log config`` as ``--set KEY=VALUE``. A bad key or value is one line naming
it, exit status 2, and nothing is stored.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from walog.cli.options import CliError, Command, add_password_options, connect, emit, password_of
from walog.cli.tables import render_table
from walog.errors import NoSuchLogError
from walog.log.log_config import DEFAULT_CONFIG, LogConfig, config_keys

_JSON_HELP = "print one JSON object instead of text"
AddAction = Callable[[str, Command, str], argparse.ArgumentParser]


def flag_of(key: str) -> str:
    """The ``log create`` flag of a setting: ``retention.max_age`` is ``--retention-max-age``."""
    return "--" + key.replace(".", "-").replace("_", "-")


def _dest(key: str) -> str:
    return "setting_" + key.replace(".", "__")


def _changes(args: argparse.Namespace) -> dict[str, str]:
    """The settings the command line gives, by key, checked (CliError, status 2)."""
    changes: dict[str, str] = {}
    for key in config_keys():
        value = getattr(args, _dest(key), None)
        if value is not None:
            changes[key] = value
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set {item!r}: expected KEY=VALUE", 2)
        changes[key.strip()] = value
    try:
        DEFAULT_CONFIG.with_settings(changes)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    return changes


def setting_rows(config: LogConfig) -> list[list[str]]:
    """``[key, value]`` rows of every setting, as ``--set`` takes them back."""
    return [[key, _text(value)] for key, value in config.settings().items()]


def settings_json(config: LogConfig) -> dict[str, object]:
    """Every setting by key, as JSON values (a durability by its name)."""
    return {k: _text(v) if _is_enum(v) else v for k, v in config.settings().items()}


def _is_enum(value: object) -> bool:
    import enum

    return isinstance(value, enum.Enum)


def _text(value: object) -> str:
    if _is_enum(value):
        return str(value.value)  # type: ignore[attr-defined]
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _print(name: str, config: LogConfig, as_json: bool) -> None:
    if as_json:
        emit(json.dumps({"name": name, "config": settings_json(config)}, indent=2))
        return
    for line in render_table(["SETTING", "VALUE"], setting_rows(config)):
        emit(line)


def create(args: argparse.Namespace) -> int:
    """``walog log create NAME [--SETTING VALUE ...] [--set KEY=VALUE ...]``."""
    changes = _changes(args)
    config = DEFAULT_CONFIG.with_settings(changes)
    with connect(args) as client:
        if args.log in client.list_logs():
            raise CliError(
                f"log {args.log!r} exists; change its settings with "
                f"'walog log config {args.log} --set KEY=VALUE'",
                1,
            )
        log = client.create_log(args.log, config, password=password_of(args))
        _print(args.log, log.config, args.json)
    return 0


def configure(args: argparse.Namespace) -> int:
    """``walog log config NAME [--set KEY=VALUE ...]``: change settings, print them all."""
    changes = _changes(args)
    with connect(args) as client:
        if args.log not in client.list_logs():  # open_log would create it
            raise NoSuchLogError(f"log {args.log!r} does not exist")
        log = client.open_log(args.log)
        config = log.configure(changes) if changes else log.stored_config()
    _print(args.log, config, args.json)
    return 0


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=f"a setting (repeatable); keys: {', '.join(config_keys())}; 'none' for no limit",
    )
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)


def add_commands(action: AddAction) -> None:
    """Add ``log create`` and ``log config`` with ``action``, the ``walog log`` group's."""
    parser = action("create", create, "create a log with the settings stored with it")
    parser.add_argument("log", help="log name")
    defaults = DEFAULT_CONFIG.settings()
    for key in config_keys():
        parser.add_argument(
            flag_of(key),
            dest=_dest(key),
            metavar="V",
            help=f"{key} [{_text(defaults[key])}]",
        )
    _add_set(parser)
    add_password_options(parser)
    parser.epilog = "Fails if the log exists: change a log's settings with 'walog log config'."

    parser = action("config", configure, "show or change (--set) a log's stored settings")
    parser.add_argument("log", help="log name")
    _add_set(parser)
    parser.epilog = (
        "Writers opened afterwards use the new settings; the retention writers apply after "
        "rolls and 'walog maintain' use them at once."
    )


__all__ = ["add_commands", "configure", "create", "flag_of", "setting_rows", "settings_json"]
