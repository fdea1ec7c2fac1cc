"""The fenced writes that end one attempt on its own: the completion inside a handler's
own transaction, failures, snoozes, releases and quarantines, and the reading of an
attempt's outcome when the answer to one of them was lost.

Every write presents the job's token; zero rows is the fence's "not yours any more", and a
write whose answer was lost is resolved from the attempts history, never guessed. The
grouped completions of handlers that wrote nothing are `completer.Completer`'s, built on
these.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from psycopg import AsyncConnection
from taskboard.core.base.errors import PermanentJobError
from taskboard.core.engine import attempt_log, leases
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import describe, is_transient
from taskboard.core.engine.flights import Flight, FlightTable
from taskboard.core.engine.outcomes import MAX_ERROR_TEXT, Outcome, error_text
from taskboard.core.engine.records import SnoozeOutcome
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.supervisor import Supervisor

COMPLETIONS = "completions"

Conn = AsyncConnection[Any]
T = TypeVar("T")


class FencedWrites:
    """One job's fenced writes, each on the worker's engine connection."""

    def __init__(
        self,
        *,
        settings: WorkerSettings,
        flights: FlightTable,
        engine: HeldConnection,
        supervisor: Supervisor,
    ) -> None:
        self._settings = settings
        self._flights = flights
        self._engine = engine
        self._supervisor = supervisor

    # --- one job on its own connection ---------------------------------------------------

    async def complete_on(self, conn: AsyncConnection[Any], flight: Flight) -> bool:
        """The fenced completion inside a handler's own transaction; False: rejected."""
        return await leases.complete(conn, *flight.lease, flight.timing)

    async def resolve_completion(self, flight: Flight, error: BaseException) -> Outcome:
        """The connection dropped while a completion was committing: ask the history."""
        outcome = await self._attempt_outcome(flight)
        if outcome == "completed":
            loop = asyncio.get_running_loop()
            return Outcome.completed(flight, loop.time() - flight.claimed_at)
        return Outcome.lost(
            flight, f"connection lost while completing ({describe(error)}); the lease will expire"
        )

    async def _attempt_outcome(self, flight: Flight) -> str | None:
        return await self._retrying(
            "reading an attempt's outcome",
            lambda conn: attempt_log.attempt_outcome(conn, *flight.lease),
        )

    async def _retrying(self, purpose: str, op: Callable[[Conn], Awaitable[T]]) -> T:
        """Run `op` on an engine connection, waiting out transient database errors (the
        fence makes a repeat harmless); anything else is raised."""
        while True:
            try:
                async with self._engine.use(purpose) as conn:
                    return await op(conn)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._supervisor.trouble(COMPLETIONS, exc)
                await asyncio.sleep(self._settings.retry_delay_cap)

    # --- failures, releases, quarantine --------------------------------------------------

    async def fail(self, flight: Flight, exc: BaseException) -> Outcome:
        """The handler failed: fenced retry-later, or dead. Never written for a lost lease."""
        if flight.lost is not None:
            return Outcome.lost(flight, flight.lost)
        error = error_text(exc)
        job = flight.job
        if flight.ran_from is not None and flight.ran_until is None:
            flight.ran_until = asyncio.get_running_loop().time()
        backoff = self._settings.backoff_for(flight.kind, job.attempt)
        try:
            result = await self._retrying(
                "failure",
                lambda conn: leases.fail(
                    conn,
                    job.id,
                    job.token,
                    error=error,
                    backoff_seconds=backoff,
                    permanent=isinstance(exc, PermanentJobError),
                    timing=flight.timing,
                ),
            )
        except Exception as db_exc:
            return await self.quarantine(
                flight, f"{error}; recording the failure failed: {describe(db_exc)}"
            )
        self._flights.remove(flight)
        if not result.owned:
            if await self._attempt_outcome(flight) == "failed":
                return Outcome.failed(flight, error, None)  # an earlier try got through
            return Outcome.rejected(flight)
        if result.dead:
            return Outcome.dead(flight, error)
        return Outcome.failed(flight, error, result.retry_at)

    async def snooze(self, flight: Flight, seconds: float, *, capped: bool = True) -> Outcome:
        """The handler asked to run again later: fenced, the attempt given back (or dead,
        past the snooze cap; a durable sleep, `capped=False`, has none)."""
        if flight.lost is not None:
            return Outcome.lost(flight, flight.lost)
        cap = self._settings.max_snoozes if capped else 2**31 - 1  # a sleep: never dead
        result = await self._retrying(
            "snooze", lambda conn: leases.snooze(conn, *flight.lease, seconds, cap=cap)
        )
        self._flights.remove(flight)
        if not result.owned:  # unless an earlier try got through (its answer was lost)
            result = SnoozeOutcome.from_history(await self._attempt_outcome(flight), cap)
        return Outcome.of_snooze(flight, result)

    async def release(self, flights: Sequence[Flight], limit: float) -> list[Outcome]:
        """Give leases back (drain). Not-started handlers get their attempt back. A stop's
        write: `limit` covers the wait for the engine connection and for the answer."""
        async with self._engine.use("release", limit, wait_counts=True) as conn:
            released = await leases.release(conn, [(f.lease, f.started) for f in flights])
        outcomes = []
        for flight in flights:
            self._flights.remove(flight)
            if flight.job.id in released:
                outcomes.append(Outcome.released(flight))
            else:
                outcomes.append(
                    Outcome.lost(flight, "not released: another worker had taken the lease")
                )
        return outcomes

    async def quarantine(self, flight: Flight, error: str) -> Outcome:
        """A statement fails on this job's row: make it dead with the reason."""
        async with self._engine.use("quarantine") as conn:
            done = await leases.quarantine(
                conn, flight.job.id, flight.job.token, error[:MAX_ERROR_TEXT]
            )
        self._flights.remove(flight)
        return Outcome.dead(flight, error) if done else Outcome.rejected(flight)

