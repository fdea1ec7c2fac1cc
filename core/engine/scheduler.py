"""The scheduler: enqueues the due slots of the schedules whose kinds this worker runs.

Every worker runs one; each slot is enqueued once, by whichever worker gets there first
(see `taskboard.core.schedules`). It wakes at the earliest next slot of its schedules, at
least every `RELOAD_SECONDS` to see schedules added or changed, and uses the database's
clock, like every deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime

from taskboard.core import schedules, sql
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import is_transient
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.engine.worker_pool import Borrowed

log = logging.getLogger("taskboard.worker")

SCHEDULER = "scheduler"
RELOAD_SECONDS = 10.0


class Scheduler:
    """The schedule loop of one worker."""

    def __init__(
        self,
        *,
        worker_id: str,
        kinds: Sequence[str],
        connection: Borrowed | HeldConnection,
        supervisor: Supervisor,
        retry_cap: float,
    ) -> None:
        self._worker_id = worker_id
        self._kinds = set(kinds)
        self._conn = connection
        self._supervisor = supervisor
        self._retry_cap = retry_cap
        self.enqueued = 0

    async def run(self) -> None:
        """Enqueue due slots, then sleep until the next one (or a reload)."""
        while True:
            try:
                wait = await self.tick()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._supervisor.trouble(SCHEDULER, exc)
                wait = self._retry_cap
            else:
                self._supervisor.ok(SCHEDULER)
            await asyncio.sleep(wait)

    async def tick(self) -> float:
        """One pass; the seconds until the next pass is due."""
        async with self._conn.use("schedules") as conn:
            cur = await conn.execute(sql.DB_NOW)
            row = await cur.fetchone()
            assert row is not None
            now: datetime = row[0]
            mine = [s for s in await schedules.list_schedules(conn) if s.kind in self._kinds]
        wait = RELOAD_SECONDS
        for schedule in mine:
            slot = schedule.due_slot(now)
            if slot is not None:
                async with self._conn.use("schedule slot") as conn:
                    job_id = await schedules.enqueue_slot(conn, schedule.name, slot)
                if job_id is not None:
                    self.enqueued += 1
                    log.info(
                        "schedule %s: slot %s enqueued as job %s", schedule.name, slot, job_id,
                        extra={"fields": {"msg": "scheduled job enqueued",
                                          "worker": self._worker_id,
                                          "schedule": schedule.name,
                                          "slot": slot.isoformat(), "job_id": job_id}},
                    )
            until = (schedule.next_run(now) - now).total_seconds()
            wait = min(wait, max(0.05, until))
        return wait
