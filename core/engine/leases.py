"""The fenced lease operations as typed async functions over one connection.

Each function runs exactly one statement from `taskboard.core.sql` and reads its rows
as typed records. Ownership is proven by the token alone; `worker_id` is recorded for
display and audit, never used for fencing. Each function names its statement on any error
it raises (`statement: CLAIM` in the exception's notes), so a log line says which one failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.base.pipelines import pipeline
from taskboard.core.engine.db_errors import named as _named
from taskboard.core.engine.records import (
    ClaimedJob,
    CompleteRow,
    FailOutcome,
    Lease,
    RenewRow,
    SnoozeOutcome,
    Verdict,
)
from taskboard.core.engine.settings import DEFAULT_CLAIM_BYTES
from taskboard.core.engine.wire import Float8Array, Int8Array, UuidArray, record_row

Conn = AsyncConnection[Any]
Timing = tuple[float | None, float | None]
"""(handler seconds, least lease margin at a renewal) of one attempt, or Nones."""


def _claim_params(
    worker_id: str,
    limit: int,
    lease_seconds: float,
    queues: Sequence[str],
    kinds: Sequence[str],
    skip: Sequence[int],
    db_kinds: Sequence[str] = (),
    db_limit: int = 0,
    kind_leases: Mapping[str, float] | None = None,
    max_bytes: int = DEFAULT_CLAIM_BYTES,
) -> dict[str, Any]:
    own = kind_leases or {}
    return {
        "lease_kinds": list(own), "kind_leases": list(own.values()),
        "max_bytes": max_bytes,
        "worker": worker_id,
        "limit": limit,
        "lease": lease_seconds,
        "queues": list(queues),
        "kinds": list(kinds),
        "skip": Int8Array(skip),
        "db_kinds": list(db_kinds),
        "db_limit": db_limit,
    }


async def claim(
    conn: Conn,
    *,
    worker_id: str,
    limit: int,
    lease_seconds: float,
    queues: Sequence[str],
    kinds: Sequence[str],
    skip: Sequence[int] = (),
    only: Sequence[int] | None = None,
    db_kinds: Sequence[str] = (),
    db_limit: int = 0,
    kind_leases: Mapping[str, float] | None = None,
    max_bytes: int = DEFAULT_CLAIM_BYTES,
) -> list[ClaimedJob]:
    """Claim up to `limit` jobs (fresh or with expired leases) with fresh tokens, at most
    `db_limit` of them of `db_kinds` (kinds whose handlers hold a connection), and no more
    once their payloads reach `max_bytes` (the first row always). A job's lease is
    `kind_leases[kind]` where its kind has one, else `lease_seconds`.

    `only` restricts the claim to those ids (the probe that finds a row breaking claims).
    """
    if limit <= 0:
        return []
    params = _claim_params(
        worker_id, limit, lease_seconds, queues, kinds, skip, db_kinds, db_limit,
        kind_leases, max_bytes
    )
    async with _named("CLAIM"), conn.cursor(row_factory=record_row(ClaimedJob)) as cur:
        if only is None:
            await cur.execute(sql.CLAIM, params)
        else:
            await cur.execute(sql.CLAIM_ONLY, {**params, "only": list(only)})
        return await cur.fetchall()


async def claim_candidates(
    conn: Conn,
    *,
    limit: int,
    queues: Sequence[str],
    kinds: Sequence[str],
    skip: Sequence[int] = (),
) -> list[int]:
    """The ids a claim would look at now, without locking them."""
    params = _claim_params("", limit, 0, queues, kinds, skip)
    async with _named("CLAIM_CANDIDATES"):
        cur = await conn.execute(sql.CLAIM_CANDIDATES, params)
        return [int(row[0]) for row in await cur.fetchall()]


async def lock_for_probe(conn: Conn, job_id: int) -> bool:
    """Lock one unfinished job for the probe's trial (False: another holds it, or it is
    finished); inside the probe's transaction."""
    async with _named("PROBE_LOCK"):
        cur = await conn.execute(sql.PROBE_LOCK, {"id": job_id})
        return await cur.fetchone() is not None


async def complete_many_and_claim(
    conn: Conn,
    completed: Sequence[Lease],
    *,
    worker_id: str,
    limit: int,
    lease_seconds: float,
    queues: Sequence[str],
    kinds: Sequence[str],
    timings: Sequence[Timing] | None = None,
    db_kinds: Sequence[str] = (),
    db_limit: int = 0,
    kind_leases: Mapping[str, float] | None = None,
    max_bytes: int = DEFAULT_CLAIM_BYTES,
) -> tuple[dict[Lease, Verdict], list[ClaimedJob]]:
    """Fenced group completion plus a claim for the freed slots: one round trip, one commit.

    With fsync on, the commit is the cost of a job; sharing it between the completions
    and the next claims is what lets a worker keep many jobs in flight cheaply. Two
    statements, not one: PostgreSQL cannot re-check (EvalPlanQual) a row updated
    concurrently inside a statement whose other CTEs also modify the table ("ModifyTable
    should not be called during EvalPlanQual"), which a fault run hit. No BEGIN/COMMIT
    either: on an autocommit connection everything a pipeline sends before its Sync is one
    implicit transaction, so the two commit together, or, if either fails, neither does.
    """
    if not conn.autocommit:
        raise ValueError("complete_many_and_claim needs an autocommit connection")
    ids = [i for i, _ in completed]
    async with _named("COMPLETE_MANY + CLAIM"), pipeline(conn):
        done = conn.cursor(row_factory=record_row(CompleteRow))
        got = conn.cursor(row_factory=record_row(ClaimedJob))
        await done.execute(sql.COMPLETE_MANY, _completion_params(completed, timings))
        await got.execute(
            sql.CLAIM,
            _claim_params(
                worker_id, limit, lease_seconds, queues, kinds, ids, db_kinds, db_limit,
                kind_leases, max_bytes,
            ),
        )
    verdicts = {(row.id, row.token): row.verdict for row in await done.fetchall()}
    return verdicts, await got.fetchall()


def _completion_params(
    leases: Sequence[Lease], timings: Sequence[Timing] | None
) -> dict[str, Any]:
    timed = list(timings) if timings is not None else [(None, None)] * len(leases)
    return {
        "ids": Int8Array([i for i, _ in leases]),
        "tokens": UuidArray([t for _, t in leases]),
        "durations": Float8Array([took for took, _ in timed]),
        "margins": Float8Array([margin for _, margin in timed]),
    }


async def complete_many(
    conn: Conn, leases: Sequence[Lease], timings: Sequence[Timing] | None = None
) -> dict[Lease, Verdict]:
    """Fenced completion of many jobs in one statement; one verdict per lease."""
    if not leases:
        return {}
    params = _completion_params(leases, timings)
    async with _named("COMPLETE_MANY"), conn.cursor(row_factory=record_row(CompleteRow)) as cur:
        await cur.execute(sql.COMPLETE_MANY, params)
        return {(row.id, row.token): row.verdict for row in await cur.fetchall()}


async def complete(
    conn: Conn, job_id: int, token: UUID, timing: Timing = (None, None)
) -> bool:
    """Fenced completion. False means zero rows: the token is stale, the job is not ours."""
    async with _named("COMPLETE"):
        cur = await conn.execute(
            sql.COMPLETE, {"id": job_id, "token": token, "took": timing[0], "margin": timing[1]}
        )
        row = await cur.fetchone()
    return bool(row and row[0] == 1)


async def renew(
    conn: Conn, leases: Sequence[Lease], *, lease_seconds: float,
    own: Sequence[float | None] | None = None,
) -> dict[Lease, Verdict]:
    """Renew all `leases` in one statement; one verdict per lease. Each is renewed for its
    own length (`own`, in the same order; None: `lease_seconds`)."""
    if not leases:
        return {}
    params = {
        "ids": Int8Array([i for i, _ in leases]),
        "tokens": UuidArray([t for _, t in leases]),
        "lease": lease_seconds,
        "leases": Float8Array(own if own is not None else [None] * len(leases)),
    }
    async with _named("RENEW"), conn.cursor(row_factory=record_row(RenewRow)) as cur:
        await cur.execute(sql.RENEW, params)
        rows = await cur.fetchall()
    verdicts: dict[Lease, Verdict] = {}
    for row in rows:
        if row.lease_expires_at is not None:
            verdicts[(row.id, row.token)] = Verdict.DONE
        elif row.cancelled:
            verdicts[(row.id, row.token)] = Verdict.CANCELLED
        else:
            verdicts[(row.id, row.token)] = Verdict.BUSY if row.busy else Verdict.REJECTED
    return verdicts


async def fail(
    conn: Conn,
    job_id: int,
    token: UUID,
    *,
    error: str,
    backoff_seconds: float,
    permanent: bool = False,
    timing: Timing = (None, None),
) -> FailOutcome:
    """Fenced failure: retry after `backoff_seconds`, or dead if attempts are used up."""
    params = {
        "id": job_id,
        "token": token,
        "error": error,
        "backoff": backoff_seconds,
        "permanent": permanent,
        "took": timing[0],
        "margin": timing[1],
    }
    async with _named("FAIL"):
        cur = await conn.execute(sql.FAIL, params)
        row = await cur.fetchone()
    if row is None:
        return FailOutcome(owned=False)
    dead = bool(row[0])
    return FailOutcome(owned=True, dead=dead, retry_at=None if dead else row[1])


async def snooze(
    conn: Conn, job_id: int, token: UUID, seconds: float, *, cap: int
) -> SnoozeOutcome:
    """Fenced snooze: the job runs again in `seconds`, its attempt given back; dead instead
    if it has been snoozed `cap` times already."""
    params = {"id": job_id, "token": token, "seconds": seconds, "cap": cap}
    async with _named("SNOOZE"):
        cur = await conn.execute(sql.SNOOZE, params)
        row = await cur.fetchone()
    if row is None:
        return SnoozeOutcome(owned=False)
    run_at, dead, error = row
    return SnoozeOutcome(owned=True, run_at=None if dead else run_at, dead=dead, error=error)


async def release(conn: Conn, items: Sequence[tuple[Lease, bool]]) -> set[int]:
    """Fenced release of unfinished leases (lease, handler started?) so another worker can
    claim them at once; returns the ids released."""
    if not items:
        return set()
    params = {
        "ids": [lease[0] for lease, _ in items],
        "tokens": [lease[1] for lease, _ in items],
        "started": [started for _, started in items],
    }
    async with _named("RELEASE"):
        cur = await conn.execute(sql.RELEASE, params)
        return {int(row[0]) for row in await cur.fetchall()}


async def row_size(conn: Conn, job_id: int) -> tuple[int | None, int] | None:
    """(payload bytes if known, bytes as stored) of one job, without reading its payload;
    None if it is gone."""
    async with _named("ROW_SIZE"):
        cur = await conn.execute(sql.ROW_SIZE, {"id": job_id})
        row = await cur.fetchone()
    return None if row is None else (row[0], int(row[1]))


async def quarantine(conn: Conn, job_id: int, token: UUID | None, error: str) -> bool:
    """Make one job dead with `error` because a statement fails on its row; True if done."""
    async with _named("QUARANTINE"):
        cur = await conn.execute(sql.QUARANTINE, {"id": job_id, "token": token, "error": error})
        row = await cur.fetchone()
    return bool(row and row[0])


async def seconds_until_claimable(
    conn: Conn, queues: Sequence[str], kinds: Sequence[str], limited: Sequence[str] = (),
    limited_wait: float = 0.0,
) -> float | None:
    """Seconds until a scheduled job comes due or a lease expires; None if nothing waits.
    Due jobs of `limited` kinds (under a fleet limit) count as due in `limited_wait`."""
    params = {"queues": list(queues), "kinds": list(kinds), "limited": list(limited),
              "limited_wait": limited_wait}
    async with _named("NEXT_WAKEUP"):
        cur = await conn.execute(sql.NEXT_WAKEUP, params)
        row = await cur.fetchone()
    if row is None or row[0] is None:
        return None
    return max(0.0, float(row[0]))
