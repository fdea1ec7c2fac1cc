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
from taskboard.core.errors import ConfigError, JobNotFound, ValidationError
from taskboard.core.kinds import KindRegistry, check_storable
from taskboard.core.names import check_queue_name

MAX_PRIORITY = 1_000_000
MAX_ATTEMPTS_LIMIT = 1000
DEFAULT_MAX_ATTEMPTS = 5
EARLIEST_RUN_AT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_RUN_AT = datetime(9999, 1, 1, tzinfo=UTC)


MAX_TIMEOUT_SECONDS = 86_400.0
UNIQUE_TRIES = 5
MAX_KEY_CHARS = 300


@dataclass(frozen=True)
class NewJob:
    """A job to enqueue. Validated against its kind by `enqueue_many`.

    `timeout` (seconds) overrides the kind's; `unique_key` makes the job unique among the
    unfinished jobs of its kind (enqueueing it again returns the job already there).
    """

    kind: str
    payload: Any = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: float | None = None
    unique_key: str | None = None


@dataclass(frozen=True)
class Enqueued:
    """Where a job went: its id, and whether a job with its unique key was already there."""

    id: int
    existed: bool = False


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
    if job.timeout is not None and not (
        isinstance(job.timeout, int | float) and 0 < job.timeout <= MAX_TIMEOUT_SECONDS
    ):
        raise ValidationError(
            f"must be between 0 and {MAX_TIMEOUT_SECONDS:g} seconds", field="timeout"
        )
    if job.unique_key is not None:
        if not isinstance(job.unique_key, str) or not 1 <= len(job.unique_key) <= MAX_KEY_CHARS:
            raise ValidationError(f"must be 1-{MAX_KEY_CHARS} characters", field="key")
        check_storable(job.unique_key, "key")
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(f"is not valid JSON: {exc}", field="payload") from None
    return NewJob(
        job.kind, payload, job.queue, job.priority, job.run_at, job.max_attempts,
        None if job.timeout is None else float(job.timeout), job.unique_key,
    )


async def enqueue_many(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[int]:
    """Validate every job, then insert them (one statement for those without a unique key);
    returns their ids, in order (a unique job already there gives that job's id).

    Validation happens before anything is written, so one bad job rejects the whole batch.
    Run it inside your own transaction (`async with conn.transaction():`) and the jobs exist
    only if that transaction commits; workers hear of them (NOTIFY) only then.
    """
    return [e.id for e in await enqueue_detailed(conn, registry, jobs)]


async def enqueue_detailed(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[Enqueued]:
    """`enqueue_many`, saying for each job whether it was already there (unique key)."""
    checked = [validate_job(registry, job) for job in jobs]
    plain = [j for j in checked if j.unique_key is None]
    ids = iter(await _insert_plain(conn, plain))
    out = []
    for job in checked:
        if job.unique_key is None:
            out.append(Enqueued(next(ids)))
        else:
            out.append(await _insert_unique(conn, job))
    return out


async def _insert_plain(conn: AsyncConnection[Any], jobs: Sequence[NewJob]) -> list[int]:
    if not jobs:
        return []
    cur = await conn.execute(
        sql.ENQUEUE_MANY,
        {
            "kinds": [j.kind for j in jobs],
            "payloads": [Jsonb(j.payload) for j in jobs],
            "queues": [j.queue for j in jobs],
            "priorities": [j.priority for j in jobs],
            "run_ats": [j.run_at for j in jobs],
            "max_attempts": [j.max_attempts for j in jobs],
            "timeouts": [j.timeout for j in jobs],
        },
    )
    return [row[0] for row in await cur.fetchall()]


async def _insert_unique(conn: AsyncConnection[Any], job: NewJob) -> Enqueued:
    params = {
        "kind": job.kind, "payload": Jsonb(job.payload), "queue": job.queue,
        "priority": job.priority, "run_at": job.run_at, "max_attempts": job.max_attempts,
        "timeout": job.timeout, "key": job.unique_key,
    }
    for _ in range(UNIQUE_TRIES):
        cur = await conn.execute(sql.ENQUEUE_UNIQUE, params)
        row = await cur.fetchone()
        if row is not None:
            return Enqueued(int(row[0]), bool(row[1]))
        # The job holding the key finished between the insert and the look-up: again.
    raise ValidationError("is being enqueued and finished by others too fast", field="key")


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
    """Cancel an unfinished job. A worker holding it hears it at once (NOTIFY) and stops its
    handler; its attempt is recorded `cancelled`, and any late write of it is fenced out."""
    cur = await conn.execute(sql.CANCEL_JOB, {"id": job_id})
    if await cur.fetchone() is None:
        await _explain_missing(conn, job_id, "is already finished")


async def _explain_missing(conn: AsyncConnection[Any], job_id: int, why: str) -> None:
    cur = await conn.execute(sql.JOB_EXISTS, {"id": job_id})
    if await cur.fetchone() is None:
        raise JobNotFound(f"job {job_id} does not exist")
    raise JobNotFound(f"job {job_id} {why}")
