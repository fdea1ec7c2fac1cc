"""The executor: runs one attempt of one job and returns its outcome.

Decodes and validates the payload (a row written by hand with a wrong shape is one dead
job, never a crashed worker), runs the handler with its context, and hands the result to
the completer. Kinds that write to the database run inside a transaction on a connection
of their own, and the fenced completion is the last statement of that transaction ("complete
in transaction"): a stale worker's writes roll back with its rejected completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any, cast

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core.base import tracing_attempts
from taskboard.core.base.errors import LeaseLost, PermanentJobError, Sleep, Snooze, ValidationError
from taskboard.core.engine.completer import Completer
from taskboard.core.engine.connection import AnswerGuard
from taskboard.core.engine.context import HandlerContext, wait_at_checkpoint
from taskboard.core.engine.db_errors import AnswerTimeout, is_transient
from taskboard.core.engine.events import Event
from taskboard.core.engine.flights import (
    DeadlinePassed,
    Flight,
    PauseGate,
    Phase,
    Stop,
    TimedOut,
)
from taskboard.core.engine.outcomes import Outcome
from taskboard.core.engine.steps import DEFAULT_MAX_RESULT_BYTES, STEPS, StepLog, store_result
from taskboard.core.engine.sync_handlers import SyncHandlers
from taskboard.core.kinds.registry import (
    Handler,
    JobKind,
    KindRegistry,
    Recorder,
)
from taskboard.core.kinds.sync_context import SyncHandler
from taskboard.core.kinds.typed import is_sync_handler


class _Rejected(Exception):
    """Raised inside a handler's transaction to roll it back after a rejected completion."""


class Executor:
    """Runs attempts."""

    def __init__(
        self,
        *,
        registry: KindRegistry,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        gate: PauseGate,
        completer: Completer,
        services: Any,
        installation_id: Callable[[], str],
        worker_id: str,
        emit: Callable[[Event], None],
        answer_timeout: float,
        recorder: Recorder | None = None,
        steps: StepLog | None = None,
        lease_seconds: float = 0.0,
    ) -> None:
        self._registry = registry
        self._steps = steps
        self._pool = pool
        self._gate = gate
        self._completer = completer
        self._services = services
        self._installation_id = installation_id
        self._worker_id = worker_id
        self._emit = emit
        self._recorder = recorder
        self._lease_seconds = lease_seconds
        # The limit on a handler's completion and commit: a silent connection is closed.
        self._answer_timeout = answer_timeout
        self._threads = SyncHandlers()
        # Whether each handler is a plain function, asked once (inspect's test, per job,
        # was ~1% of a no-op job's CPU).
        self._sync: dict[object, bool] = {}

    async def run(self, flight: Flight) -> Outcome | None:
        """The attempt's outcome to report; None when it was reported already (a grouped
        completion) or a drain stopped it (the drain reports it)."""
        # The attempt's span is current for the handler (its logs, SMTP and Stripe spans);
        # the reported outcome ends it.
        with tracing_attempts.attempt_started(
            flight, worker_id=self._worker_id, lease_seconds=flight.lease_seconds
        ):
            return await self._run_traced(flight)

    async def _run_traced(self, flight: Flight) -> Outcome | None:
        try:
            return await self._run(flight)
        except asyncio.CancelledError:
            if flight.stop is Stop.LOST:
                return Outcome.lost(flight, flight.lost or "lease lost")
            if flight.stop is Stop.CANCELLED:
                return Outcome.cancelled(flight)
            if flight.stop is Stop.TIMEOUT:
                _consume_cancel()
                return await self._completer.fail(
                    flight, TimedOut(f"timed out after {flight.timed_out:g} s")
                )
            if flight.stop is Stop.DRAIN:
                return None
            raise
        except TimedOut as exc:
            return await self._completer.fail(flight, exc)
        except Snooze as snooze:
            return await self._completer.snooze(
                flight, snooze.seconds, capped=not isinstance(snooze, Sleep)
            )
        except LeaseLost as exc:
            if flight.stop is Stop.CANCELLED:
                return Outcome.cancelled(flight)
            # The refusal's own words when there are any ("...; not starting smtp send"):
            # they say what did not happen because of the loss.
            reason = str(exc) if "; not " in str(exc) else (flight.lost or str(exc))
            if isinstance(exc, DeadlinePassed):
                tracing_attempts.local_deadline(flight, exc.what, exc.late)
                if flight.lost is None:  # seen here before the lease keeper's own check
                    tracing_attempts.lease_lost(flight, reason, "local deadline")
            flight.lost = flight.lost or reason
            return Outcome.lost(flight, reason)

    async def _run(self, flight: Flight) -> Outcome | None:
        # Starting the handler is a checkpoint: a worker paused right after its claim
        # holds the job unstarted, and one whose deadline passed meanwhile never starts it.
        if self._gate.paused:
            await wait_at_checkpoint(flight, self._gate)
        loop = asyncio.get_running_loop()
        flight.refuse("starting the handler", loop.time())
        kind = flight.kind
        if kind is None:
            return await self._completer.fail(
                flight, PermanentJobError(f"unknown job kind {flight.job.kind!r}")
            )
        try:
            payload = self._registry.validate(kind.name, json.loads(flight.job.payload))
        except ValidationError as exc:
            return await self._completer.fail(flight, PermanentJobError(f"invalid payload: {exc}"))
        except (ValueError, RecursionError, OverflowError) as exc:
            return await self._completer.fail(
                flight,
                PermanentJobError(f"invalid payload: cannot be decoded ({type(exc).__name__})"),
            )
        except Exception as exc:
            # A validator with a bug: the job fails with the reason (retried by policy)
            # rather than leaving its lease to expire and run into the same bug again.
            return await self._completer.fail(flight, exc)
        flight.phase = Phase.RUNNING
        flight.ran_from = loop.time()
        timer = self._arm_timeout(flight, kind)
        try:
            if kind.writes_db:
                return await self._run_in_transaction(flight, kind, payload)
            try:
                value = await self._handle(flight, kind, None, payload)
                if value is not None:
                    await self._store_result(flight, value)
            except _STOPS:
                raise
            except Exception as exc:
                return await self._completer.fail(flight, exc)
        finally:
            if timer is not None:
                timer.cancel()
        return await self._completer.complete(flight)

    async def _handle(
        self,
        flight: Flight,
        kind: JobKind,
        conn: AsyncConnection[Any] | None,
        payload: dict[str, Any],
    ) -> Any:
        """Run the handler; return what it returned (the job's result)."""
        handler = kind.handler
        assert handler is not None  # a worker claims only kinds it can run
        ctx = self._context(flight, conn, payload)
        sync = self._sync.get(handler)
        if sync is None:
            sync = self._sync[handler] = is_sync_handler(handler)
        if sync:
            value = await self._threads.run(cast(SyncHandler, handler), ctx)
        else:
            value = await cast(Handler, handler)(ctx)
        if flight.timed_out is not None:
            # Timed out inside an external call that was let finish: fail, not complete.
            raise TimedOut(f"timed out after {flight.timed_out:g} s")
        return value

    async def _store_result(self, flight: Flight, value: Any) -> None:
        """A handler that wrote nothing: its result goes on the engine connection, fenced,
        just before the grouped completion (which a stale holder's fails anyway)."""
        if self._steps is None:
            return
        async with self._steps.engine.use(STEPS) as conn:
            await store_result(conn, flight, value, self._steps.max_result_bytes)

    def _arm_timeout(self, flight: Flight, kind: JobKind) -> asyncio.TimerHandle | None:
        seconds = flight.job.timeout or kind.timeout
        if not seconds:
            return None
        return asyncio.get_running_loop().call_later(seconds, _time_out, flight, seconds)

    async def _run_in_transaction(
        self, flight: Flight, kind: JobKind, payload: dict[str, Any]
    ) -> Outcome:
        failing: BaseException | None = None  # what the transaction rolls back for
        try:
            async with self._pool.connection() as conn:
                flight.conn = conn
                try:
                    # Every statement the worker itself sends here has the answer limit:
                    # on a connection gone silent one without it waited for ever while the
                    # engine connection went on renewing the lease. `answer` is exited
                    # after `transaction`: the completion's limit covers the commit, and
                    # the rollback's limit (taken on the way out) the rollback.
                    async with (
                        contextlib.AsyncExitStack() as answer,
                        contextlib.AsyncExitStack() as transaction,
                    ):
                        async with self._limit(conn, "transaction start"):
                            await transaction.enter_async_context(conn.transaction())
                        try:
                            value = await self._handle(flight, kind, conn, payload)
                            if value is not None:
                                # In the handler's transaction: it commits with the
                                # completion.
                                async with self._limit(conn, "result"):
                                    await store_result(conn, flight, value, self._result_limit)
                            await self._completer.prepare(flight)
                            if flight.lost is not None:
                                raise LeaseLost(flight.lost)  # rolls the writes back
                        except BaseException as exc:
                            failing = exc
                            await answer.enter_async_context(self._limit(conn, "rollback"))
                            raise
                        await answer.enter_async_context(self._limit(conn, "completion"))
                        if not await self._completer.complete_on(conn, flight):
                            raise _Rejected()  # the stale worker's writes must not survive
                except _Rejected:
                    return Outcome.rejected(flight)
                except (psycopg.Error, AnswerTimeout) as exc:
                    if failing is not None and exc is not failing:
                        # The rollback failed or went unanswered (its connection is closed:
                        # the server rolls back alone); the attempt ends for its own reason.
                        raise failing from None
                    if flight.phase is Phase.COMPLETING and is_transient(exc):
                        # The commit may or may not have reached the server.
                        return await self._completer.resolve_completion(flight, exc)
                    raise
                finally:
                    flight.conn = None
            loop = asyncio.get_running_loop()
            return Outcome.completed(flight, loop.time() - flight.claimed_at)
        except _STOPS:
            raise
        except Exception as exc:
            return await self._completer.fail(flight, exc)

    def _limit(self, conn: AsyncConnection[Any], what: str) -> AnswerGuard:
        return AnswerGuard(lambda: conn, self._answer_timeout, what)

    def _context(
        self, flight: Flight, conn: AsyncConnection[Any] | None, payload: dict[str, Any]
    ) -> HandlerContext:
        return HandlerContext(
            flight,
            conn,
            payload,
            # A callable is asked at each attempt: the embedded stand-ins' address can
            # change while the worker runs (see `standins.runtime`).
            services=self._services() if callable(self._services) else self._services,
            installation_id=self._installation_id(),
            gate=self._gate,
            emit=self._emit,
            worker_id=self._worker_id,
            recorder=self._recorder,
            steps=self._steps,
        )

    @property
    def _result_limit(self) -> int:
        return self._steps.max_result_bytes if self._steps else DEFAULT_MAX_RESULT_BYTES


# Exceptions that stop an attempt on the worker's account, not the handler's failure.
_STOPS = (LeaseLost, TimedOut, Snooze, asyncio.CancelledError)


def _time_out(flight: Flight, seconds: float) -> None:
    """The attempt's timeout fired: stop the handler now unless it is inside an external
    call (which is let finish, and refused to go on after it)."""
    if flight.phase not in (Phase.RUNNING, Phase.EXTERNAL) or flight.stop is not None:
        return
    flight.timed_out = seconds
    if flight.phase is Phase.RUNNING and flight.task is not None:
        flight.stop = Stop.TIMEOUT
        flight.task.cancel()


def _consume_cancel() -> None:
    # The cancellation was the worker's own way of stopping the handler; the task goes on
    # to record the failure.
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
