"""The completer: every fenced write that ends an attempt (complete, fail, release,
quarantine: the one-job ones are `fenced_writes.FencedWrites`), and the grouping of
completions.

Handlers that wrote nothing have their completions grouped: while one statement is in
flight the next group gathers, so under load each commit (the real cost with fsync on)
completes many jobs and claims their replacements; when idle a group is one job and
nothing waits. Each row still gets its own verdict. A row another session holds locked
comes back busy and is tried again; an answer lost on the way (the connection dropped
during the commit) is resolved from the attempts history, never guessed.

With a second engine connection (`WorkerSettings.engine_connection_count`) two groups may
be out at once, one per connection, each taking its share of the jobs held: while one
group's completions and claim are in the database the worker reports and runs the other's
jobs. Each connection runs the same loop (`_lane`), so a group sent on either is settled,
retried and its lost answer resolved by the one code path.
"""

from __future__ import annotations

import asyncio

from taskboard.core.engine import leases
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import describe, is_transient
from taskboard.core.engine.fenced_writes import COMPLETIONS, FencedWrites
from taskboard.core.engine.flights import Flight, FlightTable, PauseGate, Phase, Refill
from taskboard.core.engine.outcomes import Outcome, Reporter
from taskboard.core.engine.records import ClaimedJob, Lease, Verdict
from taskboard.core.engine.settings import JOBS_PER_GROUP, WorkerSettings
from taskboard.core.engine.supervisor import Supervisor

__all__ = ["COMPLETIONS", "Completer"]

HOLD_STEP_SECONDS = 0.05
BUSY_RETRY_SECONDS = 0.05
# Fewer completions than this wait for the group out to come back: not worth a commit.
MIN_SECOND_GROUP = 10


class Completer(FencedWrites):
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
        second: HeldConnection | None = None,
    ) -> None:
        super().__init__(settings=settings, flights=flights, engine=engine, supervisor=supervisor)
        # The connections groups go out on: the engine connection, and with
        # `engine_connections` 2 a second one, so one group's round trip overlaps the
        # worker's own work on the other's jobs.
        self._lanes = [engine] if second is None else [engine, second]
        # Two groups out need two cohorts of jobs: a group takes its share of the jobs
        # held, but never fewer than JOBS_PER_GROUP (halving groups of 100 doubled the
        # commits per job and lost: bench/results-overlap.md).
        capacity = settings.capacity
        self._cap = max(-(-capacity // len(self._lanes)), min(capacity, JOBS_PER_GROUP))
        # A second group goes out only once this many completions wait: completions that
        # trickle in (handlers of varied length) make one group at a time, not many small.
        self._overlap_from = max(MIN_SECOND_GROUP, self._cap // 2)
        self.out = 0  # groups in the database right now
        self._gate = gate
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
        """The grouping loops, one per connection a group may go out on."""
        if len(self._lanes) == 1:
            await self._lane(self._lanes[0])
            return
        # Not a TaskGroup: the supervisor judges the lane's own exception, not a group of them.
        lanes = [asyncio.ensure_future(self._lane(held)) for held in self._lanes]
        try:
            done, _ = await asyncio.wait(lanes, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for lane in lanes:
                lane.cancel()
            await asyncio.gather(*lanes, return_exceptions=True)
        for lane in done:
            lane.result()  # raises the first lane's error

    def _take(self) -> list[tuple[Flight, asyncio.Future[None]]]:
        """The next group: up to the cap; none while a group is out and too few wait."""
        if self.out and len(self._pending) < self._overlap_from:
            return []
        batch, self._pending = self._pending[: self._cap], self._pending[self._cap :]
        if self._pending:
            self._ready.set()
        return batch

    async def _lane(self, held: HeldConnection) -> None:
        """One grouping loop. Whatever happens to a group, each of its flights either has
        its outcome (its future resolved) or goes back to the queue: a flight dropped here
        would wait for ever, its lease renewed by the keeper, its job never finished."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch = self._take()
            if not batch:
                continue
            results: dict[Flight, Outcome | None] = {}
            error: Exception | None = None
            self.out += 1
            try:
                await self._settle(held, [flight for flight, _ in batch], results)
            except Exception as exc:
                error = exc
            except asyncio.CancelledError:
                # The other lane failed (the role restarts) or the worker stops: this
                # group's flights go back to be completed again, never dropped.
                self._settled(batch, results)
                raise
            finally:
                self.out -= 1
                if self._pending:
                    self._ready.set()  # left for this lane by the other while this was out
            if error is not None:
                self._settled(batch, results)
                if not is_transient(error):
                    raise error
                self._supervisor.trouble(COMPLETIONS, error)
                self._refill.refill_failed(error)  # a claim timed out: claims shrink
                await asyncio.sleep(self._settings.retry_delay_cap)
                continue
            self._supervisor.ok(COMPLETIONS)
            if self._settled(batch, results):
                await asyncio.sleep(BUSY_RETRY_SECONDS)

    async def _settle(
        self, held: HeldConnection, flights: list[Flight], results: dict[Flight, Outcome | None]
    ) -> None:
        """One statement for the group; if it fails on something other than the
        connection, each flight alone (see `_one_by_one`)."""
        try:
            results.update(await self._group(held, flights))
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

    async def _group(
        self, held: HeldConnection, flights: list[Flight]
    ) -> dict[Flight, Outcome | None]:
        loop = asyncio.get_running_loop()
        plan = self._refill.refill_plan(len(flights))
        claimed: list[ClaimedJob] = []
        # Reserved until the replacements are adopted: the slots the verdicts free must
        # not be claimed a second time by the claim loop while the outcomes are reported.
        reserve = self._flights.reserve(plan.limit if plan else 0, plan.db_limit if plan else 0)
        with reserve, self._flights.finishing(flights if plan else ()):
            async with held.use("grouped completion") as conn:
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
            elif verdict is Verdict.GONE:
                # Not "rejected": an earlier try may have committed before the prune (a
                # soak saw a worker stopped 3.9 s after its commit, its job pruned 3.8 s
                # after it). Never reported as done either: lost, as a single completion
                # whose history is gone is (FencedWrites.resolve_completion).
                results[flight] = Outcome.lost(
                    flight, "the job was pruned before this completion's answer was read;"
                            " its outcome is unknown")
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
