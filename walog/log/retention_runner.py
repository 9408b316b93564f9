"""Retention that runs by itself: after each roll of its writer, a log's stored retention
policy is applied in the background.

At most one run is under way per writer, and at most one more is asked for while it runs
(rolls in between merge into it), so the work stays bounded however fast the writer rolls.
Appends never wait for it, and a failed run is logged and counted, never raised: the next
roll (or ``walog maintain``) tries again.
"""

from __future__ import annotations

import asyncio

from walog._loggers import get_logger
from walog.log.ledgers import LedgerClientLike
from walog.log.log_config import effective_config
from walog.log.log_metadata import read_log
from walog.log.retention import RetentionPolicy
from walog.log.truncation import enforce_retention

log = get_logger(__name__)


def deletes_anything(policy: RetentionPolicy) -> bool:
    """True when ``policy`` has a limit that can delete a ledger."""
    return policy.max_age is not None or policy.max_bytes is not None


class RetentionRunner:
    """Applies log ``name``'s retention after its writer rolls (a writer's ``after_roll``).

    Each run reads the policy stored with the log, so a change made with ``walog log
    config`` applies from the next roll on; ``fixed`` replaces it (a log opened with
    ``override_config=True``).

    Attributes:
        runs: runs that completed.
        failures: runs that failed (each logged as a warning).
        deleted: ledgers the runs deleted.
    """

    def __init__(
        self,
        client: LedgerClientLike,
        name: str,
        *,
        password: bytes = b"",
        fixed: RetentionPolicy | None = None,
    ) -> None:
        self._client = client
        self._name = name
        self._password = password
        self._fixed = fixed
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._stopped = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.runs = 0
        self.failures = 0
        self.deleted = 0

    def rolled(self) -> None:
        """The writer rolled: run retention now, or once more after the run under way."""
        if self._stopped:
            return
        if self._task is not None:
            self._again = True
            return
        self._idle.clear()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait_idle(self) -> None:
        """Return once no run is under way or asked for."""
        await self._idle.wait()

    async def stop(self) -> None:
        """Stop: a run under way is cancelled (what it removed from the list but did not
        delete yet stays pending deletion, which the next run deletes)."""
        self._stopped = True
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                await self._once()
                if not self._again or self._stopped:
                    return
        finally:
            self._task = None
            self._idle.set()

    async def _once(self) -> None:
        try:
            policy = self._fixed
            if policy is None:
                meta, _ = await read_log(self._client.ctx.store, self._name)
                policy = effective_config(meta).retention
            if not deletes_anything(policy):
                return
            deleted = await enforce_retention(
                self._client, self._name, policy, password=self._password
            )
        except Exception as exc:  # never the writer's failure: the next roll tries again
            self.failures += 1
            log.warning("retention after a roll failed", log=self._name, error=str(exc))
            return
        self.runs += 1
        self.deleted += deleted
        if deleted:
            log.info("retention deleted ledgers after a roll", log=self._name, count=deleted)


__all__ = ["RetentionRunner", "deletes_anything"]
