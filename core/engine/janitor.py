"""The janitor: every worker prunes finished jobs now and then, one of the fleet at a time.

Each pass deletes batches (each its own short transaction on a pool connection of its
own, not the engine connection, so renewals and claims never wait behind a batch) until
nothing is past its age; a worker that finds another holding the prune lock skips its
pass. See `taskboard.core.operations.retention`.
"""

from __future__ import annotations

import asyncio
import logging
import random

from taskboard.core import sql
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import is_transient
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.engine.worker_pool import Borrowed
from taskboard.core.operations import retention

log = logging.getLogger("taskboard.worker")

JANITOR = "retention"


class Janitor:
    """The retention loop of one worker."""

    def __init__(
        self,
        *,
        worker_id: str,
        settings: WorkerSettings,
        connection: Borrowed | HeldConnection,
        supervisor: Supervisor,
    ) -> None:
        self._worker_id = worker_id
        self._settings = settings
        self._conn = connection
        self._supervisor = supervisor
        self.pruned = 0

    @property
    def retention(self) -> retention.Retention:
        s = self._settings
        return retention.Retention(s.keep_completed_seconds, s.keep_dead_seconds,
                                   s.keep_cancelled_seconds)

    async def run(self) -> None:
        """A pass every `prune_every_seconds` (jittered, so a fleet started together does
        not contend for the lock at the same instant)."""
        every = self._settings.prune_every_seconds
        if not every:
            return
        while True:
            await asyncio.sleep(every * random.uniform(0.5, 1.0))
            try:
                await self.prune_once()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._supervisor.trouble(JANITOR, exc)
            else:
                self._supervisor.ok(JANITOR)

    async def prune_once(self) -> int:
        """One pass; how many jobs it deleted."""
        batch = self._settings.prune_batch
        deleted = 0
        try:
            while True:
                async with self._conn.use("pruning") as conn:
                    got = await retention.prune_batch(conn, self.retention, batch)
                    deleted += got or 0
                if got is None:
                    return deleted  # another worker is pruning
                if got < batch:
                    break
                await asyncio.sleep(0)  # let the other roles run between batches
        finally:
            # Said also when the worker stops in the middle of a pass: those batches are
            # committed (a stop right after a prune used to leave no line saying so).
            if deleted:
                self.pruned += deleted
                log.info(
                    "pruned %d finished jobs", deleted,
                    extra={"fields": {"msg": "finished jobs pruned", "worker": self._worker_id,
                                      "jobs": deleted}},
                )
        async with self._conn.use("pruning workers") as conn:
            await conn.execute(sql.PRUNE_WORKERS, {"age": retention.DAY})
        return deleted
