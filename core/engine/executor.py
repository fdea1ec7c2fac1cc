"""The executor: runs one attempt of one job and returns its outcome.

Decodes and validates the payload (a row written by hand with a wrong shape is one dead
job, never a crashed worker), runs the handler with its context, and hands the result to
the completer. Kinds that write to the database run inside a transaction on a connection
of their own, and the fenced completion is the last statement of that transaction ("complete
in transaction"): a stale worker's writes roll back with its rejected completion.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core.engine.completer import Completer
from taskboard.core.engine.context import HandlerContext, wait_at_checkpoint
from taskboard.core.engine.db_errors import is_transient
from taskboard.core.engine.events import Event
from taskboard.core.engine.flights import Flight, PauseGate, Phase, Stop
from taskboard.core.engine.outcomes import Outcome
from taskboard.core.errors import LeaseLost, PermanentJobError, ValidationError
from taskboard.core.kinds.registry import JobKind, KindRegistry


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
    ) -> None:
        self._registry = registry
        self._pool = pool
        self._gate = gate
        self._completer = completer
        self._services = services
        self._installation_id = installation_id
        self._worker_id = worker_id
        self._emit = emit

    async def run(self, flight: Flight) -> Outcome | None:
        """The attempt's outcome to report; None when it was reported already (a grouped
        completion) or a drain stopped it (the drain reports it)."""
        try:
            return await self._run(flight)
        except asyncio.CancelledError:
            if flight.stop is Stop.LOST:
                return Outcome.lost(flight, flight.lost or "lease lost")
            if flight.stop is Stop.CANCELLED:
                return Outcome.cancelled(flight)
            if flight.stop is Stop.DRAIN:
                return None
            raise
        except LeaseLost as exc:
            # The refusal's own words when there are any ("...; not starting smtp send"):
            # they say what did not happen because of the loss.
            reason = str(exc) if "; not " in str(exc) else (flight.lost or str(exc))
            flight.lost = flight.lost or reason
            return Outcome.lost(flight, reason)

    async def _run(self, flight: Flight) -> Outcome | None:
        # Starting the handler is a checkpoint: a worker paused right after its claim
        # holds the job unstarted, and one whose deadline passed meanwhile never starts it.
        await wait_at_checkpoint(flight, self._gate)
        flight.refuse("starting the handler", asyncio.get_running_loop().time())
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
        if kind.writes_db:
            return await self._run_in_transaction(flight, kind, payload)
        try:
            await kind.handler(self._context(flight, None, payload))
        except (LeaseLost, asyncio.CancelledError):
            raise
        except Exception as exc:
            return await self._completer.fail(flight, exc)
        return await self._completer.complete(flight)

    async def _run_in_transaction(
        self, flight: Flight, kind: JobKind, payload: dict[str, Any]
    ) -> Outcome:
        try:
            async with self._pool.connection() as conn:
                try:
                    async with conn.transaction():
                        await kind.handler(self._context(flight, conn, payload))
                        await self._completer.prepare(flight)
                        if flight.lost is not None:
                            raise LeaseLost(flight.lost)  # rolls the handler's writes back
                        if not await self._completer.complete_on(conn, flight):
                            raise _Rejected()  # the stale worker's writes must not survive
                except _Rejected:
                    return Outcome.rejected(flight)
                except psycopg.Error as exc:
                    if flight.phase is Phase.COMPLETING and is_transient(exc):
                        # The commit may or may not have reached the server.
                        return await self._completer.resolve_completion(flight, exc)
                    raise
            loop = asyncio.get_running_loop()
            return Outcome.completed(flight, loop.time() - flight.claimed_at)
        except (LeaseLost, asyncio.CancelledError):
            raise
        except Exception as exc:
            return await self._completer.fail(flight, exc)

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
        )
