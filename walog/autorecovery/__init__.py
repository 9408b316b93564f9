"""Auto-recovery: re-replicate the ledger fragments that name lost bookies.

``walog autorecovery`` (:func:`main`) runs :func:`recover` once (``--once``) or as a daemon.

- ``rules``: what is repaired, pure rules over ledger metadata;
- ``replicate``: finding the damaged fragments, copying their entries, the metadata swap;
- ``report``: what one pass found and did;
- ``command``: the ``walog autorecovery`` command; ``daemon``: several daemons, one elected
  auditor; ``metrics``: the daemon's metrics;
- ``decommission``: ``walog bookie decommission``, draining a bookie and retiring its id.
"""

from walog.autorecovery.command import main
from walog.autorecovery.replicate import Unrepairable, recover
from walog.autorecovery.report import Report
from walog.autorecovery.rules import Damage

__all__ = ["Damage", "Report", "Unrepairable", "main", "recover"]
