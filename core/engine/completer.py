"""The completer: every fenced write that ends an attempt (complete, fail, release,
quarantine), and the grouping of completions.

Handlers that wrote nothing have their completions grouped: while one statement is in
flight the next group gathers, so under load each commit (the real cost with fsync on)
completes many jobs and claims their replacements; when idle a group is one job and
nothing waits. Each row still gets its own verdict. A row another session holds locked
comes back busy and is tried again; an answer lost on the way (the connection dropped
during the commit) is resolved from the attempts history, never guessed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from psycopg import AsyncConnection
from taskboard.core.engine import attempt_log, leases
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import describe, is_transient
from taskboard.core.engine.flights import Flight, FlightTable, PauseGate, Phase, Refill
from taskboard.core.engine.outcomes import MAX_ERROR_TEXT, Outcome, Reporter, error_text
from taskboard.core.engine.records import ClaimedJob, Lease, SnoozeOutcome, Verdict
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.errors import PermanentJobError

COMPLETIONS = "completions"
HOLD_STEP_SECONDS = 0.05
BUSY_RETRY_SECONDS = 0.05

Conn = AsyncConnection[Any]
T = TypeVar("T")


class Completer:
    """Single and grouped fenced completions, failures, releases and quarantines."""

    def __init__(
        self,
        *,
        settings: WorkerSettings,
        flights: FlightTable,
        gate: PauseGate,
        engine: HeldConnection,
        supervisor: Supervisor,
        refill: Refill,
        reporter: Reporter,
        worker_id: str,
    ) -> None:
        self._settings = settings
        self._flights = flights
        self._gate = gate
        self._engine = engine
        self._supervisor = supervisor
        self._refill = refill
        self._reporter = reporter
        self._worker_id = worker_id
        # A flight's future resolves once its outcome was reported (by the group).
        self._pending: list[tuple[Flight, asyncio.Future[None]]] = []
        self._ready = asyncio.Event()
        self.statements = 0

    # --- the moment before the completion ------------------------------------------------

    async def prepare(self, flight: Flight) -> None:
        """The work is done; the completion is decided. A paused worker stalls here (the
        article's worker that sent the email and stopped before marking the job done),
        and its late completion then meets the fence."""
        flight.phase = Phase.COMPLETING
        loop = asyncio.get_running_loop()
        if flight.ran_until is None:
            flight.ran_until = loop.time()
        if not flight.hold_seconds and not self._gate.paused:
            return
        until = loop.time() + flight.hold_seconds
        while (left := until - loop.time()) > 0:
            await self._gate.wait()
            await asyncio.sleep(min(HOLD_STEP_SECONDS, left))
        await self._gate.wait()

    # --- grouped completions -------------------------------------------------------------

    async def complete(self, flight: Flight) -> Outcome | None:
        """Complete a flight whose handler wrote nothing, in the next group. None: the
        group reported the outcome (before claiming replacements, so every observer sees
        a slot freed before it is filled again)."""
        await self.prepare(flight)
        if flight.lost is not None:
            return Outcome.lost(flight, flight.lost)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((flight, future))
        self._ready.set()
        await future
        return None

    async def run(self) -> None:
        """The grouping loop. Whatever happens to a group, each of its flights either has
        its outcome (its future resolved) or goes back to the queue: a flight dropped here
        would wait for ever, its lease renewed by the keeper, its job never finished."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            results: dict[Flight, Outcome | None] = {}
            try:
                await self._settle([flight for flight, _ in batch], results)
            except Exception as exc:
                self._settled(batch, results)
                if not is_transient(exc):
                    raise
                self._supervisor.trouble(COMPLETIONS, exc)
                self._refill.refill_failed(exc)  # a claim timed out: claims shrink
                await asyncio.sleep(self._settings.retry_delay_cap)
                continue
            self._supervisor.ok(COMPLETIONS)
            if self._settled(batch, results):
                await asyncio.sleep(BUSY_RETRY_SECONDS)

    async def _settle(
        self, flights: list[Flight], results: dict[Flight, Outcome | None]
    ) -> None:
        """One statement for the group; if it fails on something other than the
        connection, each flight alone (see `_one_by_one`)."""
        try:
            results.update(await self._group(flights))
        except Exception as exc:
            if is_transient(exc):
                raise
            await self._one_by_one(flights, exc, results)

    def _settled(
        self, batch: list[tuple[Flight, asyncio.Future[None]]],
        results: dict[Flight, Outcome | None],
    ) -> bool:
        """Resolve the flights that have their outcome; requeue the others (busy rows, or
        not reached before an error). True when some were requeued."""
        left = []
        for flight, future in batch:
            if results.get(flight) is None:
                left.append((flight, future))
            elif not future.done():
                future.set_result(None)
        if left:
            self._requeue(left)
        return bool(left)

    def _requeue(self, batch: list[tuple[Flight, asyncio.Future[None]]]) -> None:
        self._pending[:0] = [(f, fut) for f, fut in batch if not fut.done()]
        self._ready.set()

    async def _group(self, flights: list[Flight]) -> dict[Flight, Outcome | None]:
        loop = asyncio.get_running_loop()
        plan = self._refill.refill_plan(len(flights))
        claimed: list[ClaimedJob] = []
        # Reserved until the replacements are adopted: the slots the verdicts free must
        # not be claimed a second time by the claim loop while the outcomes are reported.
        with self._flights.reserve(plan.limit if plan else 0, plan.db_limit if plan else 0):
            async with self._engine.use("grouped completion") as conn:
                sent = loop.time()  # the claim's lease clock starts with the connection in hand
                if plan is not None:
                    verdicts, claimed = await leases.complete_many_and_claim(
                        conn,
                        [f.lease for f in flights],
                        timings=[f.timing for f in flights],
                        worker_id=self._worker_id,
                        limit=plan.limit,
                        lease_seconds=self._settings.lease_seconds,
                        queues=self._settings.queues,
                        kinds=plan.kinds,
                        db_kinds=plan.db_kinds,
                        db_limit=plan.db_limit, kind_leases=plan.kind_leases,
                        max_bytes=plan.max_bytes,
                    )
                else:
                    verdicts = await leases.complete_many(
                        conn, [f.lease for f in flights], [f.timing for f in flights]
                    )
            self.statements += 1
            results = self._verdicts(flights, verdicts, loop.time())
            await self._reporter.report([o for o in results.values() if o is not None])
        self._refill.adopt(claimed, sent)
        if plan is not None and len(claimed) < plan.limit:
            self._refill.wake()  # the queue ran short: let the claim loop set its timer
        return results

    def _verdicts(
        self, flights: list[Flight], verdicts: dict[Lease, Verdict], now: float
    ) -> dict[Flight, Outcome | None]:
        results: dict[Flight, Outcome | None] = {}
        for flight in flights:
            verdict = verdicts.get(flight.lease, Verdict.REJECTED)
            if verdict is Verdict.BUSY:
                results[flight] = None
                continue
            # Freed before the replacements are adopted, so the slots add up.
            self._flights.remove(flight)
            if verdict is Verdict.DONE:
                results[flight] = Outcome.completed(flight, now - flight.claimed_at)
            else:
                results[flight] = Outcome.rejected(flight)
        return results

    async def _one_by_one(
        self, flights: list[Flight], error: Exception, results: dict[Flight, Outcome | None]
    ) -> None:
        """A group failed on something other than the connection: complete each alone,
        and quarantine the row that fails by itself. Each outcome goes into `results` and
        is reported as it is known, so a connection lost half-way (raised to the loop)
        leaves the flights already settled settled, and only the others to try again: a
        completed job completed a second time would meet its own fence and read as
        rejected."""
        self._supervisor.trouble(COMPLETIONS, error, action="completing one by one", handled=True)
        loop = asyncio.get_running_loop()
        for flight in flights:
            try:
                async with self._engine.use("completion") as conn:
                    verdicts = await leases.complete_many(conn, [flight.lease], [flight.timing])
            except Exception as exc:
                if is_transient(exc):
                    raise
                outcome = await self.quarantine(
                    flight, f"quarantined: completing it fails ({describe(exc)})"
                )
                results[flight] = outcome
                await self._reporter.report([outcome])
                continue
            settled = self._verdicts([flight], verdicts, loop.time())
            results.update(settled)
            await self._reporter.report([o for o in settled.values() if o is not None])

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

    async def release(self, flights: Sequence[Flight]) -> list[Outcome]:
        """Give leases back (drain). Not-started handlers get their attempt back."""
        async with self._engine.use("release") as conn:
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

