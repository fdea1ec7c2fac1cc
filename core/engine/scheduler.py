"""The scheduler: enqueues the due slots of the schedules whose kinds this worker runs.

Every worker runs one; each slot is enqueued once, by whichever worker gets there first
(see `taskboard.core.operations.schedules`). It wakes at the earliest next slot of its schedules, at
least every `RELOAD_SECONDS` to see schedules added or changed, and uses the database's
clock, like every deadline, read in UTC (the session's zone never moves a slot).

A schedule that fails here for a reason other than a lost connection is disabled with its
error and skipped; the other schedules and the worker go on (one bad row never makes the
scheduler role fail, which would stop the worker, on every restart).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

from taskboard.core import sql
from taskboard.core.base.errors import TaskboardError
from taskboard.core.base.secrets import one_line
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import describe, is_transient
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.engine.worker_pool import Borrowed
from taskboard.core.kinds.registry import KindRegistry
from taskboard.core.operations import schedules

log = logging.getLogger("taskboard.worker")

SCHEDULER = "scheduler"
RELOAD_SECONDS = 10.0
# A slot the statement refused (another worker fired it, or the schedule changed since it was
# read) is looked at again this soon: a changed schedule's slot must not wait for the reload.
RECHECK_SECONDS = 1.0


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
        registry: KindRegistry | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._registry = registry
        self._kinds = set(kinds)
        self._conn = connection
        self._supervisor = supervisor
        self._retry_cap = retry_cap
        self.enqueued = 0
        self.disabled = 0

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
            now: datetime = row[0].astimezone(UTC)
            mine = [
                s for s in await schedules.list_schedules(conn)
                if s.kind in self._kinds and s.disabled_at is None
            ]
        wait = RELOAD_SECONDS
        for schedule in mine:
            try:
                until = await self._fire(schedule, now)
            except Exception as exc:
                if is_transient(exc):
                    raise
                await self._disable(schedule, exc)
                continue
            wait = min(wait, max(0.05, until))
        return wait

    async def _fire(self, schedule: schedules.Schedule, now: datetime) -> float:
        """Enqueue the schedule's due slot, if any; the seconds until its next slot."""
        slot = schedule.due_slot(now)
        if slot is not None:
            if self._registry is not None:
                # A payload its kind refuses would be one dead job per slot; refuse it here.
                self._registry.validate(schedule.kind, schedule.payload)
            async with self._conn.use("schedule slot") as conn:
                job_id = await schedules.enqueue_slot(conn, schedule, slot)
            if job_id is None:
                return RECHECK_SECONDS
            self.enqueued += 1
            log.info(
                "schedule %s: slot %s enqueued as job %s", schedule.name, slot, job_id,
                extra={"fields": {"msg": "scheduled job enqueued", "worker": self._worker_id,
                                  "schedule": schedule.name, "slot": slot.isoformat(),
                                  "job_id": job_id}},
            )
            if schedule.behind(slot, now):
                return 0.0  # more missed slots to catch up on: the next pass at once
        return (schedule.next_run(now) - now).total_seconds()

    async def _disable(self, schedule: schedules.Schedule, exc: Exception) -> None:
        # Our own errors say what is wrong as they stand; others by class and first line (a
        # database error's DETAIL may quote the row, payload and all).
        error = one_line(str(exc) if isinstance(exc, TaskboardError | ValueError)
                         else describe(exc))
        try:
            async with self._conn.use("schedule disable") as conn:
                done = await schedules.disable_schedule(conn, schedule, error)
        except Exception as refused:
            if is_transient(refused):
                raise
            # A role not allowed to disable it: skip the schedule this pass, keep the rest.
            log.error("schedule %s failed and could not be disabled: %s (%s)", schedule.name,
                      error, refused, extra={"fields": {
                          "msg": "schedule failed", "worker": self._worker_id,
                          "schedule": schedule.name, "error": error}})
            return
        if done:
            self.disabled += 1
            log.error(
                "schedule %s disabled: %s", schedule.name, error,
                extra={"fields": {"msg": "schedule disabled", "worker": self._worker_id,
                                  "schedule": schedule.name, "error": error}},
            )
