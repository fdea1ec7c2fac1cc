"""What the failover tests watch: worker events with the time each was seen, and the jobs
table on whichever server is the primary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from taskboard.core.engine.events import Claimed, Completed, Event

from tests.conftest import wait_for


@dataclass
class TimedEvents:
    """Every event of the workers, with `time.monotonic()` when it was emitted."""

    seen: list[tuple[float, Event]] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.seen.append((time.monotonic(), event))

    def of(self, kind: type[Any], since: float = float("-inf")) -> list[tuple[float, Any]]:
        return [(t, e) for t, e in self.seen if isinstance(e, kind) and t >= since]

    def first_claim_after(self, worker_id: str, since: float) -> float | None:
        """When `worker_id` first claimed a job at or after `since`."""
        return next(
            (t for t, e in self.of(Claimed, since) if e.worker_id == worker_id), None
        )

    def completions(self) -> dict[int, int]:
        """How many times each job was reported completed."""
        counts: dict[int, int] = {}
        for _, e in self.of(Completed):
            counts[e.job_id] = counts.get(e.job_id, 0) + 1
        return counts


async def enqueue_sleeps(url: str, count: int, seconds: float) -> list[int]:
    """`count` sleep jobs in one commit on the server `url` reaches; their ids."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True,
                                                     connect_timeout=5) as conn:
        cur = await conn.execute(
            "INSERT INTO taskboard_jobs (kind, payload)"
            " SELECT 'sleep', jsonb_build_object('seconds', %s::float8)"
            " FROM generate_series(1, %s) RETURNING id",
            (seconds, count),
        )
        return [int(r[0]) for r in await cur.fetchall()]


async def job_rows(url: str) -> dict[int, tuple[bool, int]]:
    """Every job: (completed, attempts)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True,
                                                     connect_timeout=5) as conn:
        cur = await conn.execute(
            "SELECT id, completed_at IS NOT NULL, attempts FROM taskboard_jobs"
        )
        return {int(i): (bool(c), int(a)) for i, c, a in await cur.fetchall()}


async def wait_until(predicate: Any, *, timeout: float, what: str, step: float = 0.05) -> float:
    """`wait_for` (sync or async `predicate`), returning `time.monotonic()` when it held."""
    await wait_for(predicate, timeout=timeout, what=what, step=step)
    return time.monotonic()
