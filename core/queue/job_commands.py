"""The operator's commands on one job: retry and cancel.

Each re-checks the state it acts on in the statement that writes (issue 22): a prune, a
claim, a completion or another operator may have changed the row since any earlier look,
and a command that waited on one of them decides on the row as that one left it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.errors import UniqueViolation
from psycopg.pq import TransactionStatus
from taskboard.core import sql
from taskboard.core.base import tracing
from taskboard.core.base.errors import JobNotFound

# How often a retry refused by a unique key whose holder then finished is tried again.
KEY_TRIES = 5
SHOWN_KEY_CHARS = 60


@asynccontextmanager
async def _transaction(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    """A transaction, or a savepoint in the caller's. A block opened while a non-autocommit
    connection is idle would COMMIT on exit (psycopg begins an outer transaction then), so
    the caller's transaction is begun first and stays the caller's to commit."""
    if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        await conn.execute(sql.BEGIN_IMPLICITLY)
    async with conn.transaction():
        yield


async def retry(conn: AsyncConnection[Any], job_id: int) -> None:
    """Make a dead or cancelled job pending again with fresh attempts (and snoozes).

    `JobNotFound` (exit 3) if it does not exist, is not dead or cancelled, or a newer
    unfinished job of its kind holds its unique key (that job is named)."""
    for _ in range(KEY_TRIES):
        try:
            # A savepoint inside the caller's transaction: a refused retry leaves it usable.
            async with _transaction(conn):
                with tracing.retrying(job_id) as span:
                    cur = await conn.execute(sql.RETRY_JOB, {"id": job_id, **span.carried})
                    row = await cur.fetchone()
                    if row is not None:
                        span.caused_by(row[2], row[3], "retry of")
        except UniqueViolation:
            cur = await conn.execute(sql.UNIQUE_KEY_HOLDER, {"id": job_id})
            held = await cur.fetchone()
            if held is None:
                continue  # the holder finished since: the key is free now
            holder, key = held
            raise JobNotFound(
                f"job {job_id} cannot be retried: job {holder} holds its unique key "
                f"{_shown(key)} and is not finished (cancel it or let it finish first)"
            ) from None
        if row is None:
            await _explain_missing(conn, job_id, "is not dead or cancelled")
        return
    raise JobNotFound(f"job {job_id} cannot be retried: its unique key is taken again each time")


async def cancel(conn: AsyncConnection[Any], job_id: int) -> None:
    """Cancel an unfinished job. A worker holding it hears it at once (NOTIFY) and stops its
    handler; its attempt is recorded `cancelled`, and any late write of it is fenced out."""
    async with _transaction(conn):
        cur = await conn.execute(sql.LOCK_UNFINISHED_JOB, {"id": job_id})
        done = await cur.fetchone() is not None
        if done:
            cur = await conn.execute(sql.CANCEL_JOB, {"id": job_id})
            done = await cur.fetchone() is not None
    if not done:
        await _explain_missing(conn, job_id, "is already finished")


def _shown(key: str) -> str:
    """The key quoted, escaped and cut to fit one line."""
    shown = repr(key)
    if len(shown) <= SHOWN_KEY_CHARS:
        return shown
    return shown[: SHOWN_KEY_CHARS - 4] + "...'"


async def _explain_missing(conn: AsyncConnection[Any], job_id: int, why: str) -> None:
    cur = await conn.execute(sql.JOB_EXISTS, {"id": job_id})
    if await cur.fetchone() is None:
        raise JobNotFound(f"job {job_id} does not exist")
    raise JobNotFound(f"job {job_id} {why}")
