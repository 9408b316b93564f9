"""Auto-recovery: re-replicate the ledger fragments that name lost bookies.

``walog autorecovery`` (:func:`main`) runs :func:`recover` once (``--once``) or as a daemon.
The rules are in :mod:`walog.autorecovery.rules`, the copying and the metadata swap in
:mod:`walog.autorecovery.replicate`.
"""

from walog.autorecovery.command import main
from walog.autorecovery.replicate import Unrepairable, recover
from walog.autorecovery.report import Report
from walog.autorecovery.rules import Damage

__all__ = ["Damage", "Report", "Unrepairable", "main", "recover"]
