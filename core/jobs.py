"""Enqueueing and operator commands on jobs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from taskboard.core import sql
from taskboard.core.engine.settings import check_queue_name
from taskboard.core.errors import ConfigError, JobNotFound, ValidationError
from taskboard.core.kinds import KindRegistry

MAX_PRIORITY = 1_000_000
MAX_ATTEMPTS_LIMIT = 1000
DEFAULT_MAX_ATTEMPTS = 5
EARLIEST_RUN_AT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_RUN_AT = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class NewJob:
    """A job to enqueue. Validated against its kind by `enqueue_many`."""

    kind: str
    payload: Any = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS


def validate_job(registry: KindRegistry, job: NewJob) -> NewJob:
    """Return the job with its normalised payload, or raise `ValidationError`."""
    payload = registry.validate(job.kind, job.payload)
    try:
        check_queue_name(job.queue)
    except ConfigError as exc:
        raise ValidationError(str(exc).removeprefix("queue "), field="queue") from None
    if (
        isinstance(job.priority, bool)
        or not isinstance(job.priority, int)
        or not (-MAX_PRIORITY <= job.priority <= MAX_PRIORITY)
    ):
        raise ValidationError(f"must be an integer within ±{MAX_PRIORITY}", field="priority")
    if (
        isinstance(job.max_attempts, bool)
        or not isinstance(job.max_attempts, int)
        or not (1 <= job.max_attempts <= MAX_ATTEMPTS_LIMIT)
    ):
        raise ValidationError(f"must be an integer 1-{MAX_ATTEMPTS_LIMIT}", field="max_attempts")
    if job.run_at is not None and not isinstance(job.run_at, datetime):
        raise ValidationError("must be a datetime with a timezone", field="run_at")
    if job.run_at is not None and job.run_at.tzinfo is None:
        raise ValidationError("must include a timezone (e.g. 2026-12-02T10:00:00Z)", field="run_at")
    if job.run_at is not None and not EARLIEST_RUN_AT <= job.run_at <= LATEST_RUN_AT:
        # Outside these, PostgreSQL stores the time but Python cannot read it back (year 0
        # or past 9999), and a worker would fail on the row instead of running it.
        raise ValidationError(
            f"must be between {EARLIEST_RUN_AT:%Y-%m-%d} and {LATEST_RUN_AT:%Y-%m-%d} (UTC)",
            field="run_at",
        )
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(f"is not valid JSON: {exc}", field="payload") from None
    return NewJob(job.kind, payload, job.queue, job.priority, job.run_at, job.max_attempts)


async def enqueue_many(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[int]:
    """Validate every job, then insert them all in one statement; returns their ids.

    Validation happens before anything is written, so one bad job rejects the whole batch.
    """
    checked = [validate_job(registry, job) for job in jobs]
    if not checked:
        return []
    cur = await conn.execute(
        sql.ENQUEUE_MANY,
        {
            "kinds": [j.kind for j in checked],
            "payloads": [Jsonb(j.payload) for j in checked],
            "queues": [j.queue for j in checked],
            "priorities": [j.priority for j in checked],
            "run_ats": [j.run_at for j in checked],
            "max_attempts": [j.max_attempts for j in checked],
        },
    )
    return [row[0] for row in await cur.fetchall()]


async def enqueue(
    conn: AsyncConnection[Any], registry: KindRegistry, kind: str, payload: Any = None, **opts: Any
) -> int:
    """Enqueue one job; see `NewJob` for the options."""
    ids = await enqueue_many(
        conn, registry, [NewJob(kind, {} if payload is None else payload, **opts)]
    )
    return ids[0]


async def retry(conn: AsyncConnection[Any], job_id: int) -> None:
    """Make a dead or cancelled job pending again with fresh attempts."""
    cur = await conn.execute(sql.RETRY_JOB, {"id": job_id})
    if await cur.fetchone() is None:
        await _explain_missing(conn, job_id, "is not dead or cancelled")


async def cancel(conn: AsyncConnection[Any], job_id: int) -> None:
    """Cancel an unfinished job. A worker holding it is fenced out at its next write."""
    cur = await conn.execute(sql.CANCEL_JOB, {"id": job_id})
    if await cur.fetchone() is None:
        await _explain_missing(conn, job_id, "is already finished")


async def _explain_missing(conn: AsyncConnection[Any], job_id: int, why: str) -> None:
    cur = await conn.execute(sql.JOB_EXISTS, {"id": job_id})
    if await cur.fetchone() is None:
        raise JobNotFound(f"job {job_id} does not exist")
    raise JobNotFound(f"job {job_id} {why}")
