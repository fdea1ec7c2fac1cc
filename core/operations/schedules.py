"""Periodic jobs: schedules in cron syntax, kept in `taskboard_schedules`.

A schedule enqueues one job per slot (a time its cron expression names, read in UTC or in
the zone the schedule names; see `taskboard.core.operations.cron`, which also says what a 6-field
expression means and what daylight saving does). Every
worker that runs the schedule's kind looks for due slots; the first to move the schedule's
`last_slot` forward enqueues the job, in the same statement, so each slot runs once whatever
the number of workers, with no leader. After downtime only the latest missed slot is
enqueued (a schedule that fires every minute does not queue up an hour of catch-up runs);
slots before a schedule was created are never enqueued.

A schedule that fails when a worker evaluates or fires it (a row written by hand, an
expression a newer croniter rejects, a payload its kind now refuses, a row the jobs table
refuses) is disabled with its error, shown by `schedule list`, `status` and the dashboard,
instead of failing the worker's scheduler on every pass. `schedule add` with the same name
replaces it and enables it again.

Declare schedules in code with `ensure_schedules` at your application's start, or from the
command line: `taskboard schedule add NAME --cron EXPR KIND --payload JSON`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from taskboard.core import sql
from taskboard.core.base import tracing
from taskboard.core.base.errors import ConfigError, JobNotFound, ValidationError
from taskboard.core.base.names import check_queue_name
from taskboard.core.kinds import KindRegistry
from taskboard.core.operations import cron
from taskboard.core.queue.jobs import MAX_ATTEMPTS_LIMIT, MAX_PRIORITY

_NAME = re.compile(r"[\w.:-]{1,100}", re.ASCII)
# Slots missed by a short absence (a worker stalled, a restart, a busy machine) are fired in
# order, oldest first; after a longer one (the fleet down for hours) only the latest fires,
# so an every-second schedule does not flood the queue with the night's slots.
CATCH_UP_SECONDS = 60.0


@dataclass(frozen=True)
class Schedule:
    """A periodic job: every slot of `cron` (read in zone `tz`) enqueues `kind` with
    `payload`."""

    name: str
    cron: str
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 5
    timeout_seconds: float | None = None
    created_at: datetime | None = None  # set by the database
    last_slot: datetime | None = None  # the latest slot enqueued
    tz: str = "UTC"
    revision: int = 0  # set by the database; changes with every `schedule add` of the name
    disabled_at: datetime | None = None
    disabled_error: str | None = None

    def due_slot(self, now: datetime) -> datetime | None:
        """The slot to enqueue at `now` (UTC), if any: one not after `now` that is later than
        both the last one enqueued and the schedule's creation — the oldest such when the
        last was at most `CATCH_UP_SECONDS` ago, else the latest. `CronError` if the
        expression or zone cannot be evaluated."""
        slot = cron.previous(self.cron, self.tz, now)
        since = self.last_slot or self.created_at
        if since is None:
            return slot
        if slot <= since:
            return None
        if (now - since).total_seconds() <= CATCH_UP_SECONDS:
            return cron.following(self.cron, self.tz, since)  # the oldest missed one
        return slot

    def behind(self, fired: datetime, now: datetime) -> bool:
        """More slots than `fired` are due at `now` (a catch-up is under way)."""
        return fired < cron.previous(self.cron, self.tz, now)

    def next_run(self, now: datetime) -> datetime:
        """The first slot after `now` (UTC); `CronError` if there is none."""
        return cron.following(self.cron, self.tz, now)

    def upcoming(self, now: datetime) -> datetime | None:
        """What readers show as the next run: None for a disabled schedule or one whose
        next slot cannot be computed (a reader never fails on a bad row)."""
        if self.disabled_at is not None:
            return None
        try:
            return self.next_run(now)
        except cron.CronError:
            return None

    def problem(self, now: datetime) -> str | None:
        """Why the schedule does not run: the error it was disabled with, or the one its
        next slot gives (a row no worker has evaluated yet); None when it runs."""
        if self.disabled_at is not None:
            return self.disabled_error or "disabled"
        try:
            self.next_run(now)
        except cron.CronError as exc:
            return str(exc)
        return None


def check_schedule(registry: KindRegistry, schedule: Schedule) -> Schedule:
    """The schedule with its payload normalised, or `ValidationError` naming the problem."""
    if not _NAME.fullmatch(schedule.name):
        raise ValidationError("must be 1-100 letters, digits or . _ : -", field="name")
    try:
        cron.zone(schedule.tz)
    except cron.CronError as exc:
        raise ValidationError(str(exc), field="tz") from None
    try:
        cron.check(schedule.cron, schedule.tz, datetime.now(UTC))
    except cron.CronError as exc:
        raise ValidationError(str(exc), field="cron") from None
    payload = registry.validate(schedule.kind, schedule.payload)
    try:
        check_queue_name(schedule.queue)
    except ConfigError as exc:
        raise ValidationError(str(exc).removeprefix("queue "), field="queue") from None
    if not -MAX_PRIORITY <= schedule.priority <= MAX_PRIORITY:
        raise ValidationError(f"must be within ±{MAX_PRIORITY}", field="priority")
    if not 1 <= schedule.max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise ValidationError(f"must be 1-{MAX_ATTEMPTS_LIMIT}", field="max_attempts")
    if schedule.timeout_seconds is not None and not 0 < schedule.timeout_seconds <= 86_400:
        raise ValidationError("must be between 0 and 86400 seconds", field="timeout")
    return Schedule(
        schedule.name, schedule.cron, schedule.kind, payload, schedule.queue,
        schedule.priority, schedule.max_attempts, schedule.timeout_seconds, tz=schedule.tz,
    )


async def add_schedule(
    conn: AsyncConnection[Any], registry: KindRegistry, schedule: Schedule
) -> bool:
    """Create or replace a schedule (by name); True if it was new."""
    s = check_schedule(registry, schedule)
    cur = await conn.execute(
        sql.UPSERT_SCHEDULE,
        {
            "name": s.name, "cron": s.cron, "kind": s.kind, "payload": Jsonb(s.payload),
            "queue": s.queue, "priority": s.priority, "max_attempts": s.max_attempts,
            "timeout": s.timeout_seconds, "tz": s.tz,
            # The context it was added under: the jobs it fires link back to it.
            **tracing.current(),
        },
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def ensure_schedules(
    conn: AsyncConnection[Any], registry: KindRegistry, schedules: Sequence[Schedule]
) -> None:
    """Schedules declared in code: create or update each (call at your application's start)."""
    for schedule in schedules:
        await add_schedule(conn, registry, schedule)


async def remove_schedule(conn: AsyncConnection[Any], name: str) -> None:
    """Delete a schedule; `JobNotFound` (exit 3) if there is none by that name."""
    cur = await conn.execute(sql.REMOVE_SCHEDULE, {"name": name})
    if await cur.fetchone() is None:
        raise JobNotFound(f"no schedule named {name!r}")


async def list_schedules(conn: AsyncConnection[Any]) -> list[Schedule]:
    """Every schedule, by name."""
    async with conn.cursor(row_factory=class_row(Schedule)) as cur:
        await cur.execute(sql.LIST_SCHEDULES)
        return await cur.fetchall()


async def enqueue_slot(
    conn: AsyncConnection[Any], schedule: Schedule, slot: datetime
) -> int | None:
    """Enqueue `slot` of `schedule` unless another worker did already, or the schedule was
    removed, disabled or changed since it was read (its slot may no longer be one); the
    job's id. The job carries the firing's own trace, linked to the schedule's."""
    with tracing.firing(schedule.name, slot, schedule.kind, schedule.queue) as fire:
        cur = await conn.execute(
            sql.ENQUEUE_SLOT,
            {"name": schedule.name, "revision": schedule.revision,
             "slot": slot.astimezone(UTC), **fire.carried},
        )
        row = await cur.fetchone()
        if row is None:
            fire.note("taskboard.schedule.fired", False)  # another worker did
            return None
        fire.caused_by(row[1], row[2], "schedule")
        fire.enqueued([int(row[0])])
        return int(row[0])


async def disable_schedule(conn: AsyncConnection[Any], schedule: Schedule, error: str) -> bool:
    """Disable `schedule` with `error`, unless it was changed since it was read (the new
    version has not failed yet); True if this call disabled it."""
    cur = await conn.execute(
        sql.DISABLE_SCHEDULE,
        {"name": schedule.name, "revision": schedule.revision, "error": error[:1000]},
    )
    return await cur.fetchone() is not None
