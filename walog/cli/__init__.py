"""The ``walog`` command line: the commands of this package, and what every command shares.

- :mod:`walog.cli.options`: what every ``walog`` command shares (its parser class,
  ``--metadata`` and the other connection options, passwords, one-line errors). The
  commands that live in other packages (``walog autorecovery``, ``bookie decommission``,
  ``archive``, ``bench``) build their parsers from it;
- :mod:`walog.cli.parser`: the parser of ``walog``, with the commands below and the names
  of the ones that live elsewhere;
- :mod:`walog.cli.logs`: ``walog append``, ``logs``, ``log show``, ``truncate``;
- :mod:`walog.cli.tail`: ``walog tail``, the last records of a log or every one, following;
- :mod:`walog.cli.log_settings`: ``walog log create`` and ``log config``, a log's stored
  settings;
- :mod:`walog.cli.ledgers`: ``walog ledgers``, ``ledger show``, ``recover``;
- :mod:`walog.cli.cluster`: ``walog local`` (a cluster on this host) and ``walog bookies``;
- :mod:`walog.cli.status`: ``walog status``, one screen that says whether a cluster needs a
  human (:mod:`walog.cli.status_report` holds what it reports and draws it);
- :mod:`walog.cli.quickstart`: ``walog quickstart``, a guided tour on a throwaway cluster;
- :mod:`walog.cli.tables`: the aligned plain-text tables of the human output.

The program itself, which runs these commands and hands the others to their packages, is
:mod:`walog.main`: above those packages, as this one is below them, so no import goes both
ways.
"""
