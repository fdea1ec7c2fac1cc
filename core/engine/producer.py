"""The producer: free slots, claims, wake-ups.

Claims as many jobs as there are free slots, of the kinds this worker runs, and hands each
to `start` as a `Flight`. Slots come in two sizes: `concurrency` jobs at once, of which
only as many as there are connections for (pool - reserved) of kinds whose handlers hold one; a
claim asks for both limits in one statement, and leaves those kinds out while no
connection is free. Sleeps on LISTEN/NOTIFY wake-ups, a timer set to the earliest `run_at`
or lease deadline it can see, and a slow fallback poll.

A claim that fails on something other than the connection is probed row by row (see
`quarantine`): the row that makes it fail is put aside (dead with the reason) and the
next claim takes the others, so one bad row never stalls a queue. An error that no single
row explains goes to the supervisor. A claim that times out is retried smaller, down to one
row, and that row probed alone for its size (`claim_size`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from taskboard.core.engine import leases, limits, quarantine
from taskboard.core.engine.claim_size import ClaimSizer, is_timeout
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import is_transient, statement_of
from taskboard.core.engine.events import Claimed, EventBus, Quarantined
from taskboard.core.engine.flights import ClaimPlan, Flight, FlightTable, PauseGate
from taskboard.core.engine.lease_keeper import LeaseKeeper
from taskboard.core.engine.outcomes import WorkerCounters
from taskboard.core.engine.records import ClaimedJob
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.kinds.policy import own_leases
from taskboard.core.kinds.registry import KindRegistry

log = logging.getLogger("taskboard.worker")

CLAIMS = "claims"
# A little past a deadline, so the lease has surely expired by the database's clock too.
WAKE_SLACK_SECONDS = 0.005


class Producer:
    """The claim loop of one worker."""

    def __init__(
        self,
        *,
        worker_id: str,
        settings: WorkerSettings,
        registry: KindRegistry,
        flights: FlightTable,
        gate: PauseGate,
        engine: HeldConnection,
        supervisor: Supervisor,
        keeper: LeaseKeeper,
        counters: WorkerCounters,
        start: Callable[[Flight], None],
        bus: EventBus,
        on_empty: Callable[[], None] | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._settings = settings
        self._registry = registry
        self.kinds = registry.runnable()
        self._db_kinds = [k for k in self.kinds if _holds_connection(registry, k)]
        self._free_kinds = [k for k in self.kinds if k not in self._db_kinds]
        self._kind_leases = own_leases(registry, self.kinds)
        self._limits = limits.LimitedClaims(registry, self.kinds)
        self._flights = flights
        self._gate = gate
        self._engine = engine
        self._supervisor = supervisor
        self._keeper = keeper
        self._counters = counters
        self._start = start
        self._bus = bus
        self._emit = bus.emit
        # (local deadline after the send, renewal interval) per lease length.
        self._timing: dict[float, tuple[float, float]] = {}
        self._on_empty = on_empty
        self._wake = asyncio.Event()
        self._skip: set[int] = set()  # rows that broke a claim and could not be quarantined
        self._unexplained = 0  # claim failures in a row that no single row explained
        self._sizer = ClaimSizer(settings.claim_bytes)
        self.claiming = True

    def wake(self) -> None:
        """Look for work now (a NOTIFY arrived, a slot freed, a connection came back)."""
        self._wake.set()

    def stop_claiming(self) -> None:
        """Claim nothing more (drain)."""
        self.claiming = False
        self._wake.set()

    def plan(self, finishing: int = 0) -> ClaimPlan | None:
        """What a claim may bring back now, counting `finishing` flights (of kinds that
        hold no connection) as free; None: nothing."""
        total = self._flights.free_slots + finishing
        db = min(total, self._flights.free_connection_slots)
        if db > 0:
            limit = total if self._free_kinds else db
            plan = ClaimPlan(limit, db, self.kinds, self._db_kinds, False)
        else:
            limit = total if self._free_kinds else 0
            plan = ClaimPlan(limit, 0, self._free_kinds, [], bool(self._db_kinds))
        plan = dataclasses.replace(plan, kind_leases=self._kind_leases)
        return self._sizer.fit(plan) if limit > 0 else None

    def refill_plan(self, finishing: int) -> ClaimPlan | None:
        """What a grouped completion of `finishing` flights may claim with it (nothing while
        claims are shrunk after a timeout: the completions must not wait on them)."""
        if not self.claiming or self._gate.paused or self._sizer.shrunk:
            return None
        return self.plan(finishing)

    def refill_failed(self, exc: BaseException) -> None:
        """A grouped completion failed with `exc`: if its claim may have timed out, claims
        shrink (the claim loop makes them; the completions are retried alone)."""
        if is_timeout(exc) and statement_of(exc) != "COMPLETE_MANY":
            self._sizer.shrink()
            self.wake()

    def adopt(self, jobs: Sequence[ClaimedJob], sent: float) -> None:
        """Start flights for jobs claimed by a statement sent at local time `sent`."""
        listened, every_job = self._bus.listened, self._bus.listened_every_job
        default_lease = self._settings.lease_seconds
        earliest, shortest = float("inf"), float("inf")
        for job in jobs:
            lease = self._kind_leases.get(job.kind, default_lease)
            timing = self._timing.get(lease)
            if timing is None:
                timing = self._timing[lease] = (
                    self._keeper.deadline_for(0.0, lease), self._settings.renewal_for(lease)
                )
            flight = Flight(job, self._registry.find(job.kind), deadline=sent + timing[0],
                            claimed_at=sent, lease_seconds=lease, renew_every=timing[1])
            self._flights.add(flight)
            self._counters.claimed += 1
            earliest = min(earliest, flight.deadline)
            shortest = min(shortest, flight.renew_every)
            if every_job or (listened and job.previous_token is not None):
                previous = str(job.previous_token) if job.previous_token else None
                self._emit(Claimed(
                    self._worker_id, job.id, job.kind, str(job.token), job.attempt,
                    job.lease_expires_at, previous, job.previous_worker, job.queue,
                    max(0.0, (job.db_now - job.run_at).total_seconds()),
                ))
            self._start(flight)
        if jobs:
            self._keeper.poke(earliest, shortest)

    async def run(self) -> None:
        """Claim until told to stop."""
        while self.claiming:
            await self._gate.wait()
            if not self.claiming:
                return
            self._flights.freed.clear()
            plan = self.plan()
            if plan is None:
                self._wake.clear()
                await _first(self._flights.freed.wait(), self._wake.wait())
                continue
            self._wake.clear()
            with self._flights.reserve(plan.limit, plan.db_limit):
                try:
                    claimed, wait_for, sent = await self._claim(plan)
                except Exception as exc:
                    if is_timeout(exc):
                        await self._timed_out(exc, plan)
                        continue
                    if not is_transient(exc):
                        await self._probe(exc, plan)
                        continue
                    else:
                        self._supervisor.trouble(CLAIMS, exc)
                        await asyncio.sleep(self._settings.retry_delay_cap)
                        continue
            self._supervisor.ok(CLAIMS)
            self._sizer.answered()
            if claimed:
                self._unexplained = 0
            elif self._on_empty is not None and not len(self._flights) and wait_for > 0.1:
                # Burst mode: nothing ready, nothing held, nothing due within the slack.
                self._on_empty()
                return
            self.adopt(claimed, sent)
            if len(claimed) >= plan.limit or (claimed and wait_for == 0):
                continue
            if not self.claiming:
                return
            waits = [self._wake.wait()]
            if plan.waits_for_connection:
                # Jobs that need a connection may be due; a freed one is the time to look.
                waits.append(self._flights.freed.wait())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(*waits), wait_for)

    async def _claim(self, plan: ClaimPlan) -> tuple[list[ClaimedJob], float, float]:
        """(jobs claimed, seconds until more may be due, local time the claim was sent)."""
        wait_for = self._settings.poll_seconds
        async with self._engine.use("claim") as conn:
            # The lease's local clock starts here, with the connection in hand: waiting for
            # the engine lock or a (re)connection is not charged to the jobs (their database
            # lease starts later still, when the statement runs).
            sent = asyncio.get_running_loop().time()
            claimed = await leases.claim(
                conn,
                worker_id=self._worker_id,
                limit=plan.limit,
                lease_seconds=self._settings.lease_seconds,
                queues=self._settings.queues,
                kinds=plan.kinds,
                skip=sorted(self._skip),
                db_kinds=plan.db_kinds,
                db_limit=plan.db_limit,
                kind_leases=plan.kind_leases,
                max_bytes=plan.max_bytes,
            )
            claimed += await self._limits.claim(conn, plan, claimed, self._worker_id,
                                                self._settings, sorted(self._skip))
            if len(claimed) < plan.limit:
                due = await leases.seconds_until_claimable(
                    conn, self._settings.queues, plan.kinds, self._limits.kinds, self._limits.wait)
                if due is not None:
                    wait_for = min(wait_for, due + WAKE_SLACK_SECONDS)
        return claimed, wait_for, sent

    async def _probe(self, error: Exception, plan: ClaimPlan) -> None:
        """A claim failed on a row's account, perhaps: find it and put it aside."""
        found = await quarantine.probe(
            self._engine, worker_id=self._worker_id, lease_seconds=self._settings.lease_seconds,
            queues=self._settings.queues, kinds=plan.kinds, skip=sorted(self._skip),
            limit=plan.limit,
        )
        self._put_aside(found)
        if not found.quarantined and not found.unquarantinable:
            # Another worker may have put the row aside first, or no row is to blame; a
            # second unexplained failure in a row is the supervisor's to judge.
            self._unexplained += 1
            if self._unexplained >= 2:
                raise error
            self._supervisor.trouble(
                CLAIMS, error, action="no single row explains it; claiming again", handled=True
            )
            return
        self._unexplained = 0
        self._supervisor.trouble(
            CLAIMS, error,
            action=f"quarantined {len(found.quarantined)} row(s) that broke the claim"
            + (f", {len(found.unquarantinable)} skipped" if found.unquarantinable else ""),
            handled=True,
        )

    async def _timed_out(self, error: Exception, plan: ClaimPlan) -> None:
        """A claim ran out of time: claim less, or, at one row, find that row and put it
        aside (`claim_size`)."""
        if not self._sizer.timed_out(plan):
            self._supervisor.trouble(
                CLAIMS, error, action="claiming fewer rows and bytes next, down to one row",
                handled=True,
            )
            return
        try:
            found = await quarantine.probe_size(
                self._engine, worker_id=self._worker_id,
                lease_seconds=self._settings.lease_seconds, queues=self._settings.queues,
                kinds=plan.kinds, skip=sorted(self._skip),
            )
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._supervisor.trouble(CLAIMS, exc)
            await asyncio.sleep(self._settings.retry_delay_cap)
            return
        self._put_aside(found)
        action = (
            f"quarantined {len(found.quarantined)} row(s) too large to claim in time"
            if found.quarantined else "a claim of one row timed out, no row to blame; retrying"
        )
        self._supervisor.trouble(CLAIMS, error, action=action, handled=True)
        if not found.quarantined:
            await asyncio.sleep(self._settings.retry_delay_cap)

    def _put_aside(self, found: quarantine.Probe) -> None:
        for job_id, q_exc in found.unquarantinable:
            self._skip.add(job_id)
            self._supervisor.trouble(CLAIMS, q_exc, action=f"skipping job {job_id} from now on")
        for job_id, reason in found.quarantined:
            self._quarantined(job_id, reason)

    def _quarantined(self, job_id: int, reason: str) -> None:
        self._counters.quarantined += 1
        log.warning(
            "job %s quarantined",
            job_id,
            extra={"fields": {"msg": "job quarantined", "worker": self._worker_id,
                              "job_id": job_id, "error": reason}},
        )
        self._emit(Quarantined(self._worker_id, job_id, reason))


async def _first(*waits: Coroutine[Any, Any, object]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _holds_connection(registry: KindRegistry, name: str) -> bool:
    kind = registry.find(name)
    return kind is not None and kind.writes_db
