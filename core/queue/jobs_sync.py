"""Enqueueing from synchronous code (a WSGI application, Django, Flask, a script) with a
sync psycopg `Connection`, in the application's own transaction.

The jobs are written by the same statements as `jobs.enqueue_many`'s, and workers hear of
them by the same NOTIFY, which PostgreSQL sends only when the application's transaction
commits: a rolled-back request leaves no job and wakes no worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from taskboard.core import sql
from taskboard.core.base import tracing
from taskboard.core.kinds import KindRegistry
from taskboard.core.queue.dependencies import attach_sync
from taskboard.core.queue.job_rows import JobRows
from taskboard.core.queue.jobs import UNIQUE_TRIES, NewJob, _too_fast, _validate_batch
from taskboard.core.queue.pg_arrays import register as register_arrays


def enqueue_many_sync(
    conn: Connection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[int]:
    """`jobs.enqueue_many` on a sync connection: every job validated, then inserted; the
    ids in input order. Inside the caller's transaction, the jobs exist only if it commits."""
    with tracing.enqueuing(jobs) as span:
        ids = _enqueue_many_sync(conn, registry, jobs, span)
        span.enqueued(ids)
    return ids


def _enqueue_many_sync(
    conn: Connection[Any], registry: KindRegistry, jobs: Sequence[NewJob],
    span: tracing.Enqueuing,
) -> list[int]:
    batch = _validate_batch(registry, jobs, conn.info.encoding, span.carried)
    if not batch.unique.rows and not batch.waits:
        _insert_plain(conn, batch.plain, batch.ids)
    else:
        # As in `jobs._enqueue`: the batch whole or absent, in the caller's transaction
        # when there is one (begun first, so the block does not commit it on exit).
        if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
            conn.execute(sql.BEGIN_IMPLICITLY)
        with conn.transaction():
            _insert_plain(conn, batch.plain, batch.ids)
            if batch.unique.rows:
                _insert_unique(conn, batch.unique, batch.ids, batch.existed)
            attach_sync(conn, batch.parents(), span)
    return batch.settled()[0]


def enqueue_sync(
    conn: Connection[Any], registry: KindRegistry, kind: str, payload: Any = None, **opts: Any
) -> int:
    """Enqueue one job on a sync connection; see `NewJob` for the options."""
    job = NewJob(kind, {} if payload is None else payload, **opts)
    return enqueue_many_sync(conn, registry, [job])[0]


def _insert_plain(conn: Connection[Any], rows: JobRows, ids: list[int]) -> None:
    if not rows.rows:
        return
    cur = conn.cursor(binary=True, row_factory=tuple_row)
    register_arrays(cur.adapters)
    cur.execute(sql.ENQUEUE_MANY, rows.params(conn.info.encoding, wake=True))
    row = cur.fetchone()
    assert row is not None
    for at, job_id in zip(rows.at, row[0], strict=True):
        ids[at] = job_id


def _insert_unique(
    conn: Connection[Any], rows: JobRows, ids: list[int], existed: list[bool]
) -> None:
    for _ in range(UNIQUE_TRIES):
        cur = conn.cursor(binary=True, row_factory=tuple_row)
        register_arrays(cur.adapters)
        cur.execute(sql.ENQUEUE_UNIQUE_MANY, rows.params(conn.info.encoding))
        again = rows.answered(cur.fetchall(), ids, existed)
        if not again.rows:
            return
        rows = again
    raise _too_fast(rows, len(ids))
