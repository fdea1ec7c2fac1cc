"""`taskboard_jobs` reports every state of every queue at each scrape, zero when empty
(issue 26: some states came and went, others were missing)."""

from __future__ import annotations

from typing import Any

import psycopg
from taskboard.core.runtime.metrics_jobs import JOB_STATES, JobsCollector


async def test_every_state_of_every_queue_is_reported_zero_or_not(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    await conn.execute(
        "INSERT INTO taskboard_jobs (kind, queue, completed_at) VALUES ('noop', 'mail', now())"
    )
    await conn.execute(
        "INSERT INTO taskboard_jobs (kind, queue, run_at)"
        " VALUES ('noop', 'default', now() + interval '1 hour')"
    )
    [jobs, *_] = JobsCollector(db_url, timeout=10).collect()
    got = {(s.labels["queue"], s.labels["state"]): s.value for s in jobs.samples}
    assert set(got) == {(q, st) for q in ("default", "mail") for st in JOB_STATES}, got
    assert got[("mail", "completed")] == 1 and got[("mail", "pending")] == 0
    assert got[("default", "scheduled")] == 1 and got[("default", "dead")] == 0
