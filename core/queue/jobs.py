"""Enqueueing jobs (the operator's commands on them, retry and cancel, are re-exported
from `taskboard.core.queue.job_commands`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from taskboard.core import sql
from taskboard.core.base import tracing
from taskboard.core.base.errors import ConfigError, ValidationError
from taskboard.core.base.names import check_queue_name
from taskboard.core.kinds import JsonObject, KindRegistry, check_storable
from taskboard.core.queue.dependencies import attach, check_after
from taskboard.core.queue.job_commands import cancel as cancel
from taskboard.core.queue.job_commands import retry as retry
from taskboard.core.queue.job_rows import Batch, JobRows
from taskboard.core.queue.pg_arrays import register as register_arrays
from taskboard.core.queue.results import result as result

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

    `timeout` (seconds) and `max_attempts` override the kind's (None: the kind's, else
    5 attempts); `unique_key` makes the job unique among the unfinished jobs of its kind
    (enqueueing it again returns the job already there); `after` names jobs that must
    complete before this one may run (`taskboard.core.queue.dependencies`).
    """

    kind: str
    payload: Any = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    unique_key: str | None = None
    after: Sequence[int] = ()


@dataclass(frozen=True)
class Enqueued:
    """Where a job went: its id, and whether a job with its unique key was already there."""

    id: int
    existed: bool = False


def validate_job(registry: KindRegistry, job: NewJob) -> NewJob:
    """Return the job with its normalised payload, or raise `ValidationError`."""
    payload, _ = _check(registry, job, set())
    return NewJob(
        job.kind, payload, job.queue, job.priority, job.run_at, _attempts(registry, job),
        None if job.timeout is None else float(job.timeout), job.unique_key,
        check_after(job.after),
    )


# One encoder for every payload, made once (`json.dumps` with options builds a new one per
# call, which cost more than the encoding itself). No circular-reference markers: the
# storability check has already refused anything nested deeper than 64 (a cycle through
# a tuple, which it does not walk, ends in RecursionError, caught below). Raw UTF-8 rather
# than \u escapes: a database not in UTF-8 could not take the escapes.
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_C_JSON = c_make_encoder and c_make_encoder(
    None, _JSON.default, encode_basestring, None, ":", ",", False, False, False)


def _encode_json(payload: Any) -> str:
    return "".join(_C_JSON(payload, 0)) if _C_JSON else _JSON.encode(payload)


def _check(
    registry: KindRegistry, job: NewJob, queues: set[str], encoding: str = "utf-8"
) -> tuple[JsonObject, bytes]:
    """Every check of one job; returns the normalised payload and its JSON text, encoded as
    the connection will send it. `queues` holds the names already found good in this batch
    (the check is a function of the name alone; a batch has a handful for thousands of jobs)."""
    payload = registry.validate(job.kind, job.payload)
    queue = job.queue
    if type(queue) is not str or queue not in queues:
        try:
            check_queue_name(queue)
        except ConfigError as exc:
            raise ValidationError(str(exc).removeprefix("queue "), field="queue") from None
        queues.add(queue)
    priority, run_at, timeout = job.priority, job.run_at, job.timeout
    attempts = _attempts(registry, job)
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not (-MAX_PRIORITY <= priority <= MAX_PRIORITY)
    ):
        raise ValidationError(f"must be an integer within ±{MAX_PRIORITY}", field="priority")
    if (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not (1 <= attempts <= MAX_ATTEMPTS_LIMIT)
    ):
        raise ValidationError(f"must be an integer 1-{MAX_ATTEMPTS_LIMIT}", field="max_attempts")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise ValidationError("must be a datetime with a timezone", field="run_at")
        if run_at.tzinfo is None:
            raise ValidationError(
                "must include a timezone (e.g. 2026-12-02T10:00:00Z)", field="run_at"
            )
        if not EARLIEST_RUN_AT <= run_at <= LATEST_RUN_AT:
            # Outside these, PostgreSQL stores the time but Python cannot read it back (year
            # 0 or past 9999), and a worker would fail on the row instead of running it.
            raise ValidationError(
                f"must be between {EARLIEST_RUN_AT:%Y-%m-%d} and {LATEST_RUN_AT:%Y-%m-%d} (UTC)",
                field="run_at",
            )
    if timeout is not None and not (
        isinstance(timeout, int | float) and 0 < timeout <= MAX_TIMEOUT_SECONDS
    ):
        raise ValidationError(
            f"must be between 0 and {MAX_TIMEOUT_SECONDS:g} seconds", field="timeout"
        )
    if job.unique_key is not None:
        if not isinstance(job.unique_key, str) or not 1 <= len(job.unique_key) <= MAX_KEY_CHARS:
            raise ValidationError(f"must be 1-{MAX_KEY_CHARS} characters", field="key")
        check_storable(job.unique_key, "key")
    try:
        data = _encode_json(payload).encode(encoding)
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError included
        raise ValidationError(f"is not valid JSON: {exc}", field="payload") from None
    registry.check_size(job.kind, len(data))
    return payload, data


def _validate_batch(
    registry: KindRegistry, jobs: Sequence[NewJob], encoding: str, carried: tracing.Carried
) -> Batch:
    """Check every job before anything is written; one bad job refuses the batch with its
    index named."""
    plain, unique, dups = JobRows(), JobRows(), {}
    plain.trace = unique.trace = carried
    queues: set[str] = set()
    first: dict[tuple[str, str], int] = {}
    for at, job in enumerate(jobs):
        try:
            if not isinstance(job, NewJob):
                raise ValidationError(f"must be a NewJob, got {type(job).__name__}")
            _, data = _check(registry, job, queues, encoding)
            check_after(job.after)
        except ValidationError as exc:
            raise _located(exc, at, len(jobs)) from None
        key = job.unique_key
        if key is not None and (seen := first.setdefault((job.kind, key), at)) != at:
            dups[at] = seen
            continue
        # int()/float(): an IntEnum priority must travel as a number, not as its name.
        (plain if key is None else unique).rows.append((
            at, job.kind, data, job.queue, int(job.priority), job.run_at,
            _attempts(registry, job), None if job.timeout is None else float(job.timeout), key))
    return Batch(jobs, plain, unique, dups, [0] * len(jobs), [False] * len(jobs))


def _attempts(registry: KindRegistry, job: NewJob) -> int:
    """The job's own max_attempts, else its kind's, else the default (checked by `_check`)."""
    if job.max_attempts is not None:
        return job.max_attempts
    kind = registry.find(job.kind)
    if kind is not None and kind.max_attempts is not None:
        return kind.max_attempts
    return DEFAULT_MAX_ATTEMPTS


def _located(exc: ValidationError, at: int, batch: int) -> ValidationError:
    """The error with the job's index in front (`jobs[3]: priority: ...`); a batch of one
    has nothing to point at."""
    if batch == 1:
        return exc
    located = ValidationError(f"jobs[{at}]: {exc}")
    located.field = exc.field
    return located


def _too_fast(rows: JobRows, batch: int) -> ValidationError:
    """A unique job whose key's holder finished under it on every try (`UNIQUE_TRIES`)."""
    return _located(
        ValidationError("is being enqueued and finished by others too fast", field="key"),
        rows.rows[0][0], batch,
    )


async def enqueue_many(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[int]:
    """Validate every job, then insert them (one statement for those without a unique key);
    returns their ids, in input order (a unique job already there gives that job's id).

    Validation happens before anything is written, so one bad job rejects the whole batch
    with a one-line error naming it (`jobs[i]: field: why`). A batch is all or nothing. Run
    it inside your own transaction (`async with conn.transaction():`) and the jobs exist
    only if that transaction commits; workers hear of them (one NOTIFY per queue) only then.
    """
    ids, _ = await _enqueue(conn, registry, jobs)
    return ids


async def enqueue_detailed(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[Enqueued]:
    """`enqueue_many`, saying for each job whether it was already there (unique key)."""
    ids, existed = await _enqueue(conn, registry, jobs)
    return [Enqueued(i, e) for i, e in zip(ids, existed, strict=True)]


async def _enqueue(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> tuple[list[int], list[bool]]:
    # The span covers validation too: a refused batch is an error on the caller's trace.
    with tracing.enqueuing(jobs) as span:
        ids, existed = await _enqueue_rows(conn, registry, jobs, span)
        span.enqueued(ids)
    return ids, existed


async def _enqueue_rows(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob],
    span: tracing.Enqueuing,
) -> tuple[list[int], list[bool]]:
    batch = _validate_batch(registry, jobs, conn.info.encoding, span.carried)
    if not batch.unique.rows and not batch.waits:
        await _insert_plain(conn, batch.plain, batch.ids)
    else:
        # Two statements (or more, on retries) in one transaction, or a savepoint in the
        # caller's: the batch is whole or absent, and each queue is notified once. A block
        # opened while a non-autocommit connection is idle would COMMIT on exit (psycopg
        # begins an outer transaction then), so begin the caller's transaction first.
        if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
            await conn.execute(sql.BEGIN_IMPLICITLY)
        async with conn.transaction():
            await _insert_plain(conn, batch.plain, batch.ids)
            if batch.unique.rows:
                await _insert_unique(conn, batch.unique, batch.ids, batch.existed)
            await attach(conn, batch.parents(), span)
    return batch.settled()


async def _insert_plain(conn: AsyncConnection[Any], rows: JobRows, ids: list[int]) -> None:
    if not rows.rows:
        return
    cur = conn.cursor(binary=True, row_factory=tuple_row)
    register_arrays(cur.adapters)
    await cur.execute(sql.ENQUEUE_MANY, rows.params(conn.info.encoding, wake=True))
    row = await cur.fetchone()
    assert row is not None
    for at, job_id in zip(rows.at, row[0], strict=True):
        ids[at] = job_id


async def _insert_unique(
    conn: AsyncConnection[Any], rows: JobRows, ids: list[int], existed: list[bool]
) -> None:
    for _ in range(UNIQUE_TRIES):
        cur = conn.cursor(binary=True, row_factory=tuple_row)
        register_arrays(cur.adapters)
        await cur.execute(sql.ENQUEUE_UNIQUE_MANY, rows.params(conn.info.encoding))
        again = rows.answered(await cur.fetchall(), ids, existed)
        if not again.rows:
            return
        rows = again
    raise _too_fast(rows, len(ids))


async def enqueue(
    conn: AsyncConnection[Any], registry: KindRegistry, kind: str, payload: Any = None, **opts: Any
) -> int:
    """Enqueue one job; see `NewJob` for the options."""
    ids = await enqueue_many(
        conn, registry, [NewJob(kind, {} if payload is None else payload, **opts)]
    )
    return ids[0]
