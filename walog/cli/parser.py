"""The parser of the ``walog`` command: the commands of this package, each with the shared
options (:mod:`walog.cli.options`), and the names of the commands implemented elsewhere,
listed for ``walog --help`` only (they parse their own arguments; :mod:`walog.main` hands
them over)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from walog._version import __version__
from walog.cli import cluster, ledgers, logs, quickstart
from walog.cli.options import AddCommand, Command, CommandParser, add_connection_options


def build_parser(delegated: Mapping[str, str]) -> CommandParser:
    """The parser of ``walog``; ``delegated``: the one-line help of each command that parses
    its own arguments, by name."""
    common = CommandParser(add_help=False)
    add_connection_options(common)
    parser = CommandParser(
        prog="walog",
        description="walog: a replicated write-ahead log built on BookKeeper-style ledgers.",
    )
    parser.add_argument("--version", action="version", version=f"walog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True

    def command(name: str, run: Command, text: str) -> argparse.ArgumentParser:
        p: CommandParser = sub.add_parser(name, parents=[common], help=text, description=text)
        p.subcommand = True
        p.set_defaults(func=run)
        return p

    def own(name: str, run: Command, text: str) -> argparse.ArgumentParser:
        """A command that reaches no cluster: none of the connection options."""
        p: CommandParser = sub.add_parser(name, help=text, description=text)
        p.subcommand = True
        p.set_defaults(func=run)
        return p

    def group(name: str, text: str) -> AddCommand:
        """``walog NAME ACTION``: the function that adds an ACTION."""
        actions = sub.add_parser(name, help=text, description=text).add_subparsers(
            dest="action", metavar="ACTION", parser_class=CommandParser
        )
        actions.required = True

        def action(action_name: str, run: Command, action_text: str) -> argparse.ArgumentParser:
            p: CommandParser = actions.add_parser(action_name, parents=[common], help=action_text)
            p.subcommand = True
            p.set_defaults(func=run)
            return p

        return action

    quickstart.add_commands(own)
    cluster.add_commands(command)
    logs.add_commands(command, group)
    ledgers.add_commands(command, group)
    for name, text in delegated.items():
        p = sub.add_parser(name, parents=[common], help=text, description=text)
        p.epilog = "Arguments are handed unchanged to the implementation."
    return parser


__all__ = ["build_parser"]
