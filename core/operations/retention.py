"""Retention: finished jobs (and their attempts) deleted after an age, in bounded batches.

Completed jobs go after a day, dead and cancelled ones after a week (settable). Billing
records stay: the audit of what was charged is never pruned with its job. Rows of workers
gone for more than a day go too. Workers prune by themselves (one of the fleet at a time,
under an advisory lock: no extra process to run); `taskboard prune` does the same at once.
Each batch is one short transaction, so no statement holds locks for long. The batch's
DELETE re-checks "finished and past its age" on each row it deletes (migration 7): a job
retried while the prune runs is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from taskboard.core import sql

DAY = 86_400.0
DEFAULT_BATCH = 500


@dataclass(frozen=True)
class Retention:
    """How long finished rows are kept, in seconds."""

    completed: float = DAY
    dead: float = 7 * DAY
    cancelled: float = 7 * DAY
    workers: float = DAY

    @classmethod
    def all_older_than(cls, seconds: float) -> Retention:
        """The same age for every finished state (`taskboard prune --older-than`)."""
        return cls(seconds, seconds, seconds, max(seconds, DAY))


@dataclass
class Pruned:
    """What one prune deleted."""

    jobs: int = 0
    workers: int = 0
    batches: int = 0
    skipped: bool = False  # another process holds the prune lock


async def prune_batch(
    conn: AsyncConnection[Any], retention: Retention, batch: int = DEFAULT_BATCH
) -> int | None:
    """Delete up to `batch` finished jobs past their age; None if another process prunes."""
    async with conn.transaction():
        cur = await conn.execute(sql.PRUNE_LOCK)
        row = await cur.fetchone()
        if not row or not row[0]:
            return None
        cur = await conn.execute(
            sql.PRUNE_FINISHED,
            {"completed": retention.completed, "dead": retention.dead,
             "cancelled": retention.cancelled, "batch": batch},
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def prune(
    conn: AsyncConnection[Any],
    retention: Retention,
    *,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[Pruned], None] | None = None,
) -> Pruned:
    """Prune until nothing is left past its age; `progress` is told after each batch."""
    done = Pruned()
    while True:
        deleted = await prune_batch(conn, retention, batch)
        if deleted is None:
            done.skipped = True
            return done
        done.jobs += deleted
        done.batches += 1
        if progress is not None:
            progress(done)
        if deleted < batch:
            break
    cur = await conn.execute(sql.PRUNE_WORKERS, {"age": retention.workers})
    row = await cur.fetchone()
    done.workers = int(row[0]) if row else 0
    return done
