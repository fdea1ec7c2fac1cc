"""Looking into the queue: one job in full, jobs by state, lease advice per kind, and the
recent activity the dashboard draws as trends. Used by `taskboard history`, `taskboard
advise` and the dashboard; every read goes through an index, whatever the table's size.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg.rows import class_row, dict_row
from taskboard.core import sql
from taskboard.core.base import tracing
from taskboard.core.base.errors import JobNotFound
from taskboard.core.view.board import (
    AttemptRow,
    ChargeRecord,
    ChargeSeen,
    EmailCopy,
    JobAction,
    JobDetail,
    JobListRow,
    KindAdvice,
    KindLimitRow,
    SendRecord,
)
from taskboard.core.view.step_rows import job_steps

STATES = ("pending", "scheduled", "running", "completed", "dead", "cancelled")
_LISTS: dict[str, LiteralString] = {
    "pending": sql.LIST_PENDING,
    "scheduled": sql.LIST_SCHEDULED,
    "running": sql.LIST_RUNNING,
    "completed": sql.LIST_COMPLETED,
    "dead": sql.LIST_DEAD_JOBS,
    "cancelled": sql.LIST_CANCELLED,
}
# Payload fields whose values are never shown: credentials, card data, and the like.
_SECRET_FIELD = re.compile(
    r"pass|secret|token|api.?key|auth|card|cvc|cvv|iban|ssn|private", re.IGNORECASE
)
MASK = "***"
ADVICE_WINDOW = 5000


def mask_payload(value: Any, key: str = "") -> Any:
    """`value` with the values of secret-looking fields replaced by `***`, at any depth."""
    if key and _SECRET_FIELD.search(key) and not isinstance(value, dict | list):
        return MASK
    if isinstance(value, dict):
        return {k: mask_payload(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_payload(v, key) for v in value]
    return value


def _state(row: dict[str, Any]) -> str:
    if row["completed_at"] is not None:
        return "completed"
    if row["failed_at"] is not None:
        return "dead"
    if row["cancelled_at"] is not None:
        return "cancelled"
    if row["token"] is not None:
        return "running"
    if row.get("waiting_on"):
        return "waiting"  # for its parents (`after`), parked where no claim looks
    return "pending" if row["run_at"] <= row["db_now"] else "scheduled"


async def job_detail(conn: AsyncConnection[Any], job_id: int) -> JobDetail:
    """The job's row, its attempts and its effect records; `JobNotFound` if none."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql.JOB_ROW, {"id": job_id})
        row = await cur.fetchone()
        if row is None:
            raise JobNotFound(f"job {job_id} does not exist (or was pruned)")
        await cur.execute(sql.DB_NOW)
        now = await cur.fetchone()
        assert now is not None
        row["db_now"] = now["now"]
    async with conn.cursor(row_factory=class_row(AttemptRow)) as acur:
        await acur.execute(sql.JOB_ATTEMPTS_DETAIL, {"id": job_id})
        attempts = tuple(await acur.fetchall())
    async with conn.cursor(row_factory=dict_row) as ccur:
        await ccur.execute(sql.JOB_CHARGES, {"id": job_id})
        charges = tuple(
            ChargeRecord(c["payment_intent"], c["amount"], c["currency"], attempt=c["attempt"],
                         worker=c["worker_id"], status=c["status"])
            for c in await ccur.fetchall()
        )
        await ccur.execute(sql.JOB_SENDS, {"id": job_id})
        sends = tuple(
            SendRecord(r["sent_at"], r["message_id"], r["recipient"], r["attempt"],
                       r["worker_id"])
            for r in await ccur.fetchall()
        )
    steps = await job_steps(conn, job_id)
    async with conn.cursor() as pcur:
        await pcur.execute(sql.WAITS_ON, {"id": job_id})
        after = tuple(f"#{pid} {kind} {state}" for pid, kind, state in await pcur.fetchall())
    async with conn.cursor(row_factory=class_row(JobAction)) as xcur:
        await xcur.execute(sql.JOB_ACTIONS, {"id": job_id})
        actions = tuple(await xcur.fetchall())
    payload = row["payload"] if isinstance(row["payload"], dict) else {"value": row["payload"]}
    return JobDetail(
        id=row["id"],
        kind=row["kind"],
        queue=row["queue"],
        state=_state(row),
        payload=mask_payload(payload),
        attempts_used=row["attempts"],
        max_attempts=row["max_attempts"],
        run_at=row["run_at"],
        created_at=row["created_at"],
        finished_at=row["completed_at"] or row["failed_at"] or row["cancelled_at"],
        last_error=row["last_error"],
        unique_key=row["unique_key"],
        timeout_seconds=row["timeout_seconds"],
        holder=row["claimed_by"] if row["token"] is not None else None,
        lease_expires_at=row["lease_expires_at"],
        attempts=attempts,
        charges=charges,
        sends=sends,
        steps=steps,
        after=after,
        result=row["result"] if row["completed_at"] is not None else None,
        trace_id=tracing.trace_id_of(row["traceparent"]),
        actions=actions,
    )


def with_effects(
    detail: JobDetail,
    emails: Sequence[EmailCopy],
    charges: Sequence[ChargeSeen],
    scope: str,
) -> JobDetail:
    """`detail` with what the stand-ins saw for the job: each email copy tied to the claim
    its `X-Taskboard-Attempt` header names (and so to that claim's worker), and the charges
    the endpoint made, beside the ones the billing handler recorded. A charge the endpoint
    made that no record holds is money moved whose record was never written (a worker killed
    between Stripe's answer and its record, or a record it logged as unwritten)."""
    workers = {a.ordinal: a.worker for a in detail.attempts}
    copies = [
        dataclasses.replace(c, worker=workers.get(c.attempt) if c.attempt else None)
        for c in emails
    ]
    seen = {c.payment_intent: c for c in charges}
    merged = [
        dataclasses.replace(
            r,
            replays=seen[r.payment_intent].replays if r.payment_intent in seen else None,
            charged_at=seen[r.payment_intent].at if r.payment_intent in seen else None,
        )
        for r in detail.charges
    ]
    recorded = {r.payment_intent for r in detail.charges}
    merged += [
        ChargeRecord(c.payment_intent, c.amount, c.currency, c.replays, False, c.at)
        for c in charges
        if c.payment_intent not in recorded
    ]
    return dataclasses.replace(
        detail, emails=tuple(copies), charges=tuple(merged), effects_scope=scope
    )


async def list_jobs(
    conn: AsyncConnection[Any], state: str, *, needle: str | None = None, limit: int = 200
) -> list[JobListRow]:
    """Jobs in `state` (see `STATES`), filtered by kind, queue, id or error text."""
    if state not in _LISTS:
        raise ValueError(f"state must be one of {', '.join(STATES)}")
    needle = needle.strip() if needle else None
    params = {"needle": needle or None, "like": f"%{needle}%" if needle else None, "limit": limit}
    async with conn.cursor(row_factory=class_row(JobListRow)) as cur:
        await cur.execute(_LISTS[state], params)
        return await cur.fetchall()


async def lease_advice(
    conn: AsyncConnection[Any], window: int = ADVICE_WINDOW
) -> list[KindAdvice]:
    """Timings per kind over the most recent `window` attempts with a recorded run (the
    verdict is `lease_judgement.judge`'s)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql.LEASE_ADVICE, {"window": window})
        rows: Sequence[dict[str, Any]] = await cur.fetchall()
    return [KindAdvice(**r) for r in rows]


async def kind_limits(conn: AsyncConnection[Any]) -> list[KindLimitRow]:
    """The kinds under a fleet-wide limit, with the leases holding them and the due jobs
    waiting on them (the board reads the same rows with its refresh)."""
    async with conn.cursor(row_factory=class_row(KindLimitRow)) as cur:
        await cur.execute(sql.KIND_LIMITS)
        return await cur.fetchall()
