"""Durable steps: `ctx.step(name, fn)` runs `fn` once per job, and its fenced checkpoint.

A step's record is written on the worker's engine connection (autocommit, one statement,
shared with the worker's other checkpoints that arrive meanwhile: `step_group`), never in
the handler's transaction: it must outlive the attempt as the effect does. The
statement checks the lease token while holding the job's row (`sql.RECORD_STEPS`), so a
record is the current holder's or it is refused; a refused one is still written, marked
`rejected`, and stops the handler as a lost lease does (DESIGN invariant 18). A later
attempt reads the recorded steps once, at its first `ctx.step` (not the first claim: there
can be none), and replays them without running `fn`: a job that never calls `ctx.step`
pays nothing.

While `fn` runs and its record is written the attempt is in an external call (as inside
`ctx.external`): a lost lease, a drain or a timeout waits for the record instead of cutting
the step in half, so a refused checkpoint is seen and kept rather than never attempted.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from taskboard.core import sql
from taskboard.core.base import tracing_attempts
from taskboard.core.base.errors import LeaseLost, PermanentJobError, ValidationError
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.events import EffectRefused, Event, StepCheckpoint
from taskboard.core.engine.flights import Flight, PauseGate, Phase, wait_at_checkpoint
from taskboard.core.engine.step_group import BUSY, CheckpointGroup
from taskboard.core.engine.step_group import STEPS as STEPS  # what the engine use is named
from taskboard.core.kinds.payload_rules import check_storable

DEFAULT_MAX_RESULT_BYTES = 1_000_000
LOCKED_RETRY_SECONDS = 0.05
log = logging.getLogger("taskboard.worker")
_MISSING = object()


@dataclass(frozen=True)
class StepLog:
    """What one worker's steps need: its engine connection, its events, the size limit."""

    worker_id: str
    engine: HeldConnection
    emit: Callable[[Event], None]
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    group: CheckpointGroup = field(default_factory=CheckpointGroup, compare=False)


def encode_result(value: Any, what: str, limit: int) -> str:
    """`value` as JSON text, or `PermanentJobError` naming `what`: a result that cannot be
    stored fails the job for good (running it again would only fail the same way)."""
    try:
        check_storable(value, "result")
        text = json.dumps(value, allow_nan=False)
    except ValidationError as exc:
        raise PermanentJobError(f"{what}: {exc}") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise PermanentJobError(f"{what}: result is not JSON ({exc})") from None
    size = len(text)  # ASCII: escapes included
    if size > limit:
        raise PermanentJobError(f"{what}: result is {size} bytes; at most {limit}")
    return text


class AttemptSteps:
    """The steps of one attempt: what earlier attempts recorded, and the names used."""

    def __init__(self, log: StepLog, flight: Flight, gate: PauseGate) -> None:
        self._log = log
        self._flight = flight
        self._gate = gate
        self._recorded: dict[str, Any] | None = None
        self._used: set[str] = set()

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise PermanentJobError(f"step name must be a non-empty string, got {name!r}")
        if name in self._used:
            raise PermanentJobError(f"step {name!r} ran twice in one attempt (names are unique)")
        self._used.add(name)
        flight = self._flight
        recorded = await self._load()
        found = recorded.get(name, _MISSING)
        if found is not _MISSING:
            self._emit(name, "replayed")
            tracing_attempts.step_replayed(flight.job, name)
            return found
        await wait_at_checkpoint(flight, self._gate)
        now = asyncio.get_running_loop().time()
        try:
            flight.refuse(f"starting step {name!r}", now)
        except LeaseLost:
            # The step that did not start, reported as itself, as `ctx.external` reports
            # the call that did not happen (the dashboard lists it).
            job = flight.job
            self._log.emit(EffectRefused(self._log.worker_id, job.id, str(job.token),
                                         f"step {name}", max(0.0, now - flight.deadline)))
            raise
        previous = flight.phase
        flight.phase = Phase.EXTERNAL
        try:
            with tracing_attempts.step_running(flight.job, name) as span:
                value = await _call(fn, args, kwargs)
                text = encode_result(value, f"step {name!r}", self._log.max_result_bytes)
                outcome = await self._record(name, text)
                span.ended(outcome)
        finally:
            flight.phase = previous
        if outcome == "rejected":
            self._emit(name, "rejected")
            job = flight.job
            reason = (
                f"job {job.id}: the lease was lost; not recording step {name!r} "
                "(effect happened, record fenced out)"
            )
            flight.lost = flight.lost or reason
            raise LeaseLost(reason)
        self._emit(name, "recorded")
        # What a replay would return: the value as JSON gives it back.
        return json.loads(text)

    async def _load(self) -> dict[str, Any]:
        if self._recorded is None and self._flight.job.ordinal == 1:
            # The job's first claim ever: nobody before it could have recorded a step, so a
            # first attempt's step costs its checkpoint alone.
            self._recorded = {}
        if self._recorded is None:
            async with self._log.engine.use(STEPS) as conn:
                cur = await conn.execute(sql.RECORDED_STEPS, {"id": self._flight.job.id})
                self._recorded = {name: result for name, result in await cur.fetchall()}
        return self._recorded

    async def _record(self, name: str, text: str) -> str:
        """The fenced checkpoint. A row locked by another session (a reclaim committing, an
        operator's transaction) makes it try again shortly (`BUSY`: the row was skipped; or
        the engine's short lock_timeout ran out), while the lease's local deadline allows;
        past it the record is given up with the lease (the effect happened: logged in full,
        and the new owner runs the step)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                outcome = await self._record_once(name, text)
                if outcome != BUSY:
                    return outcome
            except psycopg.errors.LockNotAvailable:
                pass  # waiting on the steps' unique index (the new owner writing the same)
            if loop.time() + LOCKED_RETRY_SECONDS >= self._flight.deadline:
                job = self._flight.job
                # A warning, as a lost lease is: the effect's own record (a send, a charge)
                # is written apart by the effect log; only the replay is lost, so the new
                # owner runs the step again, as before steps existed.
                log.warning("step record not written: job %s step %r (row locked until "
                            "the lease's local deadline); result %s", job.id, name, text)
                raise LeaseLost(
                    f"job {job.id}: the row stayed locked; not recording step {name!r} "
                    "(effect happened, record not written)"
                )
            await asyncio.sleep(LOCKED_RETRY_SECONDS)

    async def _record_once(self, name: str, text: str) -> str:
        job = self._flight.job
        params = {
            "id": job.id,
            "token": job.token,
            "name": name,
            "result": text,
            "attempt": job.ordinal,
            "worker": self._log.worker_id,
        }
        # With the worker's other checkpoints that arrive meanwhile: one commit for them all.
        return await self._log.group.record(self._log.engine, params)

    def _emit(self, name: str, outcome: str) -> None:
        job = self._flight.job
        self._log.emit(
            StepCheckpoint(self._log.worker_id, job.id, str(job.token), job.kind, name,
                           job.ordinal, outcome)
        )


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An async `fn` is awaited; a plain one runs in a thread, off the event loop (which
    keeps renewing the lease meanwhile)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


async def store_result(
    conn: Any, flight: Flight, value: Any, limit: int
) -> bool:
    """Write the handler's return value on the job, fenced; False: not ours any more."""
    text = encode_result(value, "handler", limit)
    job = flight.job
    cur = await conn.execute(
        sql.STORE_RESULT, {"id": job.id, "token": job.token, "result": text}
    )
    return bool(cur.rowcount)
