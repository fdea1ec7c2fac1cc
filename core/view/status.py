"""Reading the board from the database: counts, workers, claims, failures, dead jobs.

Used by `taskboard status` and by the dashboard's refresh. Runs a handful of cheap reads,
each row read as a typed record; the claims list is capped so a board with a million rows
still refreshes quickly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row, dict_row, kwargs_row
from taskboard.core import sql
from taskboard.core.base.pipelines import pipeline
from taskboard.core.operations.schedules import Schedule
from taskboard.core.view.board import (
    Activity,
    BoardSnapshot,
    ClaimRow,
    DeadRow,
    EffectOfUncompleted,
    Effects,
    FailureRow,
    JobCounts,
    KindLimitRow,
    OrphanKind,
    PausedQueueRow,
    ScheduleRow,
    SendSeen,
    WorkerRow,
)

ACTIVITY_WINDOW = 10.0
# A worker whose heartbeat is older than this is shown as gone.
GONE_AFTER_SECONDS = 10.0
KEEP_STOPPED_SECONDS = 300.0
RECENT_SEND_RECORDS = 500  # the latest send records the effects panel looks at


@dataclass(frozen=True)
class _Counts:
    pending: int
    scheduled: int
    claimed: int
    expired: int
    completed: int
    dead: int
    cancelled: int
    db_now: datetime


def _worker_row(*, kinds: list[str], **fields: Any) -> WorkerRow:
    return WorkerRow(kinds=tuple(kinds), **fields)


async def read_board(
    conn: AsyncConnection[Any],
    *,
    database: str,
    mode: str,
    claims_limit: int = 200,
    failures_limit: int = 50,
    dead_limit: int = 50,
    embedded_ids: frozenset[str] = frozenset(),
    effects: Effects | None = None,
) -> BoardSnapshot:
    """One consistent-enough snapshot of the board (one read per panel, one round trip)."""
    async with pipeline(conn):
        counts_cur = conn.cursor(row_factory=class_row(_Counts))
        workers_cur = conn.cursor(row_factory=kwargs_row(_worker_row))
        claims_cur = conn.cursor(row_factory=class_row(ClaimRow))
        trouble_cur = conn.cursor(row_factory=class_row(FailureRow))
        dead_cur = conn.cursor(row_factory=class_row(DeadRow))
        orphans_cur = conn.cursor(row_factory=class_row(OrphanKind))
        queues_cur = conn.cursor(row_factory=class_row(PausedQueueRow))
        schedules_cur = conn.cursor(row_factory=class_row(Schedule))
        activity_cur = conn.cursor(row_factory=dict_row)
        sends_cur = conn.cursor(row_factory=class_row(SendSeen))
        flagged_cur = conn.cursor(row_factory=class_row(EffectOfUncompleted))
        limits_cur = conn.cursor(row_factory=class_row(KindLimitRow))
        await counts_cur.execute(sql.JOB_COUNTS)
        await workers_cur.execute(
            sql.LIST_WORKERS,
            {"keep_stopped": KEEP_STOPPED_SECONDS, "gone_after": GONE_AFTER_SECONDS},
        )
        await claims_cur.execute(sql.LIST_CLAIMS, {"limit": claims_limit})
        await trouble_cur.execute(sql.LIST_TROUBLE, {"limit": failures_limit})
        await dead_cur.execute(sql.LIST_DEAD, {"limit": dead_limit})
        await orphans_cur.execute(sql.ORPHAN_KINDS, {"gone_after": GONE_AFTER_SECONDS})
        await queues_cur.execute(sql.BOARD_PAUSED_QUEUES)
        await schedules_cur.execute(sql.LIST_SCHEDULES)
        await activity_cur.execute(sql.RECENT_ACTIVITY, {"window": ACTIVITY_WINDOW})
        await sends_cur.execute(sql.RECENT_SENDS, {"limit": RECENT_SEND_RECORDS})
        await flagged_cur.execute(sql.EFFECTS_OF_UNCOMPLETED, {"limit": dead_limit})
        await limits_cur.execute(sql.KIND_LIMITS)
    [c] = await counts_cur.fetchall()
    counts = JobCounts(
        c.pending, c.scheduled, c.claimed, c.expired, c.completed, c.dead, c.cancelled
    )
    return BoardSnapshot(
        db_now=c.db_now,
        database=database,
        mode=mode,
        workers=tuple(
            dataclasses.replace(w, embedded=w.id in embedded_ids)
            for w in await workers_cur.fetchall()
        ),
        claims=tuple(await claims_cur.fetchall()),
        claims_total=counts.claimed + counts.expired,
        failures=tuple(reversed(await trouble_cur.fetchall())),
        dead=tuple(await dead_cur.fetchall()),
        counts=counts,
        orphans=tuple(await orphans_cur.fetchall()),
        paused_queues=tuple(await queues_cur.fetchall()),
        schedules=tuple(
            ScheduleRow(s.name, s.cron, s.kind, s.queue, s.last_slot,
                        s.upcoming(c.db_now), s.problem(c.db_now))
            for s in await schedules_cur.fetchall()
        ),
        activity=_activity(await activity_cur.fetchone()),
        # The records (every relay, every worker) beside what this process's stand-ins saw.
        effects=dataclasses.replace(
            effects or Effects(),
            sends=tuple(await sends_cur.fetchall()),
            uncompleted=tuple(await flagged_cur.fetchall()),
        ),
        limits=tuple(await limits_cur.fetchall()),
    )


def _activity(row: dict[str, Any] | None) -> Activity:
    if row is None:
        return Activity()
    pickup = row["pickup_p50"]
    return Activity(ACTIVITY_WINDOW, int(row["completed"]),
                    None if pickup is None else float(pickup), int(row["lost"]))


async def job_history(conn: AsyncConnection[Any], job_id: int) -> list[dict[str, Any]]:
    """The attempts history of one job, oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql.JOB_ATTEMPTS, {"id": job_id})
        return await cur.fetchall()
