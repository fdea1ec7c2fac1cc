"""Retry and cancel by filter: after a Stripe or SMTP outage the dead jobs are hundreds, and
one id at a time is no tool (issue 26).

The filter is fixed when the command starts (`until`, and `since` from the operator's
duration, on the database's clock), so a job that dies while the command runs is not
swept up with the ones the operator looked at. Jobs are taken in bounded batches in id
order, one transaction each: a batch's row locks never hold a worker up for long, and
each writing statement re-checks the filter on the rows it writes (invariant 15), so a job
a worker, a prune or another operator changed since the batch was read is left alone.
Every job acted on gets a line in its history (`taskboard_job_actions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg.errors import UniqueViolation
from taskboard.core import sql
from taskboard.core.base import tracing
from taskboard.core.base.errors import ConfigError, JobNotFound
from taskboard.core.queue.job_commands import retry

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
SHOWN_IDS = 10

Action = Literal["retry", "cancel"]
# The states each action can act on; `None` in a filter means all of them.
RETRY_STATES = ("dead", "cancelled")
CANCEL_STATES = ("pending", "scheduled", "running")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a bulk command acts on; a field left `None` does not narrow."""

    kind: str | None = None
    queue: str | None = None
    state: str | None = None
    error: str | None = None  # text the last error contains, any case
    since_seconds: float | None = None  # entered its state at most this long ago
    needle: str | None = None  # the dashboard's list filter: kind, queue, id or error text

    def is_empty(self) -> bool:
        """True when nothing narrows (every job of the action's states would match)."""
        return all(
            v is None
            for v in (self.kind, self.queue, self.state, self.error, self.since_seconds,
                      self.needle)
        )

    def describe(self) -> str:
        """The filter as the command line spells it, for the job's history."""
        parts = [
            f"--{name} {value}"
            for name, value in (
                ("kind", self.kind),
                ("queue", self.queue),
                ("state", self.state),
                ("error", repr(self.error) if self.error is not None else None),
                ("since", f"{self.since_seconds:g}s" if self.since_seconds is not None else None),
                ("matching", repr(self.needle) if self.needle is not None else None),
            )
            if value is not None
        ]
        return " ".join(parts) or "(no filter)"


@dataclass(frozen=True)
class Preview:
    """A dry run: how many jobs the filter names now, and the first ids."""

    count: int
    first_ids: tuple[int, ...]


@dataclass
class BulkResult:
    """What a bulk command did: jobs acted on, batches, and the jobs it had to leave."""

    done: int = 0
    batches: int = 0
    first_ids: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # one line per job left as it was


def check_filter(action: Action, f: JobFilter) -> None:
    """`ConfigError` (exit 2) for a state the action cannot act on, or no filter at all."""
    states = RETRY_STATES if action == "retry" else CANCEL_STATES
    if f.state is not None and f.state not in states:
        raise ConfigError(
            f"{action} acts on {' or '.join(states)} jobs, not {f.state!r} (--state)"
        )
    if f.is_empty():
        raise ConfigError(
            f"{action} needs a job id or at least one of --kind, --queue, --state, --error, "
            "--since (every job at once is not a default)"
        )


async def _params(conn: AsyncConnection[Any], action: Action, f: JobFilter) -> dict[str, Any]:
    cur = await conn.execute(sql.FILTER_CLOCK, {"seconds": f.since_seconds or 0.0})
    row = await cur.fetchone()
    assert row is not None
    until: datetime = row[0]
    since: datetime | None = row[1] if f.since_seconds is not None else None
    state = f.state or ("retryable" if action == "retry" else "unfinished")
    needle = f.needle.strip() if f.needle else None
    return {
        "kind": f.kind, "queue": f.queue, "state": state, "error": f.error,
        "since": since, "until": until, "needle": needle or None,
        "like": f"%{needle}%" if needle else None,
    }


async def preview(conn: AsyncConnection[Any], action: Action, f: JobFilter) -> Preview:
    """How many jobs `action` would act on now and the first `SHOWN_IDS` of them."""
    check_filter(action, f)
    params = await _params(conn, action, f)
    cur = await conn.execute(sql.COUNT_MATCHING, {**params, "shown": SHOWN_IDS})
    row = await cur.fetchone()
    assert row is not None
    return Preview(count=row[0], first_ids=tuple(row[1] or ()))


async def retry_matching(
    conn: AsyncConnection[Any], f: JobFilter, *, batch: int = DEFAULT_BATCH
) -> BulkResult:
    """Make every dead or cancelled job the filter names pending again."""
    return await _run(conn, "retry", f, batch)


async def cancel_matching(
    conn: AsyncConnection[Any], f: JobFilter, *, batch: int = DEFAULT_BATCH
) -> BulkResult:
    """Cancel every unfinished job the filter names; workers holding one stop its handler."""
    return await _run(conn, "cancel", f, batch)


class BulkRun:
    """One retry or cancel by filter, a batch at a time: `start` fixes the filter's clock,
    each `step` acts on the next batch in its own transaction and says whether there may be
    more. A caller that must answer within seconds (the dashboard) runs one step per call."""

    def __init__(self, action: Action, f: JobFilter, batch: int = DEFAULT_BATCH) -> None:
        check_filter(action, f)
        if not 1 <= batch <= MAX_BATCH:
            raise ConfigError(f"--batch must be between 1 and {MAX_BATCH}, got {batch}")
        self.action: Action = action
        self.filter = f
        self.batch = batch
        self.result = BulkResult()
        """What the steps so far did."""
        self._params: dict[str, Any] | None = None
        self._after = 0

    async def start(self, conn: AsyncConnection[Any]) -> None:
        """Fix `until` (and `since`) on the database's clock."""
        if not conn.autocommit:
            # Each batch commits on its own; inside a caller's transaction they would all
            # hold their locks to its end.
            raise ConfigError("bulk commands need an autocommit connection")
        self._params = await _params(conn, self.action, self.filter)

    async def step(self, conn: AsyncConnection[Any]) -> bool:
        """Act on the next batch; False once no job past the last one matches."""
        assert self._params is not None, "start() first"
        params = self._params
        cur = await conn.execute(
            sql.NEXT_MATCHING, {**params, "after": self._after, "batch": self.batch}
        )
        row = await cur.fetchone()
        ids: list[int] = list(row[0] or ()) if row else []
        if not ids:
            return False
        self._after = ids[-1]
        step = {**params, "ids": ids, "detail": f"by filter {self.filter.describe()}"}
        result = self.result
        if self.action == "retry":
            acted = await _retry_batch(conn, step, result)
        else:
            acted = await _cancel_batch(conn, step)
        result.batches += 1
        result.done += len(acted)
        result.first_ids.extend(acted[: max(0, SHOWN_IDS - len(result.first_ids))])
        return True


async def _run(conn: AsyncConnection[Any], action: Action, f: JobFilter, batch: int) -> BulkResult:
    run = BulkRun(action, f, batch)
    await run.start(conn)
    while await run.step(conn):
        pass
    return run.result


async def _retry_batch(
    conn: AsyncConnection[Any], step: dict[str, Any], result: BulkResult
) -> list[int]:
    try:
        # One span per batch, as a batch enqueue is one; each job gets its context and the
        # span links to each job's earlier one.
        with tracing.retrying() as span:
            async with conn.transaction():
                cur = await conn.execute(sql.RETRY_BATCH, {**step, **span.carried})
                row = await cur.fetchone()
                assert row is not None
                acted: list[int] = list(row[0])
            span.note("messaging.batch.message_count", len(acted))
            for job_id, traceparent, tracestate in row[2] or ():
                span.caused_by(traceparent, tracestate, "retry of", int(job_id))
    except UniqueViolation:
        # Two jobs of the batch share a key, or an enqueue took one since the statement's
        # snapshot: this batch goes one job at a time, each refusal named.
        return await _retry_one_by_one(conn, step, result)
    for job_id in sorted(set(step["ids"]) - set(acted)):
        held = await _key_holder(conn, job_id)
        if held is not None:
            result.refused.append(held)
    return acted


async def _retry_one_by_one(
    conn: AsyncConnection[Any], step: dict[str, Any], result: BulkResult
) -> list[int]:
    acted = []
    for job_id in step["ids"]:
        async with conn.transaction():
            cur = await conn.execute(sql.LOCK_BATCH, {**step, "ids": [job_id]})
            if await cur.fetchone() is None:
                continue  # no longer matches
            try:
                await retry(conn, job_id)
            except JobNotFound as exc:
                result.refused.append(str(exc))
                continue
            await conn.execute(sql.NOTE_RETRIED, {"id": job_id, "detail": step["detail"]})
        acted.append(job_id)
    return acted


async def _key_holder(conn: AsyncConnection[Any], job_id: int) -> str | None:
    cur = await conn.execute(sql.UNIQUE_KEY_HOLDER, {"id": job_id})
    row = await cur.fetchone()
    if row is None:
        return None
    return f"job {job_id}: job {row[0]} holds its unique key and is not finished"


async def _cancel_batch(conn: AsyncConnection[Any], step: dict[str, Any]) -> list[int]:
    async with conn.transaction():
        await conn.execute(sql.LOCK_BATCH, step)
        cur = await conn.execute(sql.CANCEL_BATCH, step)
        row = await cur.fetchone()
        assert row is not None
        return list(row[0])
