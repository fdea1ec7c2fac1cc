"""The producer: free slots, claims, wake-ups.

Claims as many jobs as there are free slots, of the kinds this worker runs, and hands each
to `start` as a `Flight`. Slots come in two sizes: `concurrency` jobs at once, of which
only as many as there are connections for (pool - 2) of kinds whose handlers hold one; a
claim asks for both limits in one statement, and leaves those kinds out while no
connection is free. Sleeps on LISTEN/NOTIFY wake-ups, a timer set to the earliest `run_at`
or lease deadline it can see, and a slow fallback poll.

A claim that fails on something other than the connection is probed row by row (see
`quarantine`): the row that makes it fail is put aside (dead with the reason) and the
next claim takes the others, so one bad row never stalls a queue. An error that no single
row explains goes to the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from taskboard.core.engine import leases, limits, quarantine
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import is_transient
from taskboard.core.engine.events import Claimed, Event, Quarantined
from taskboard.core.engine.flights import ClaimPlan, Flight, FlightTable, PauseGate
from taskboard.core.engine.lease_keeper import LeaseKeeper
from taskboard.core.engine.leases import Conn
from taskboard.core.engine.outcomes import WorkerCounters
from taskboard.core.engine.records import ClaimedJob
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.supervisor import Supervisor
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
        emit: Callable[[Event], None],
        on_empty: Callable[[], None] | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._settings = settings
        self._registry = registry
        self.kinds = registry.runnable()
        self._db_kinds = [k for k in self.kinds if _holds_connection(registry, k)]
        self._free_kinds = [k for k in self.kinds if k not in self._db_kinds]
        self._kind_leases = own_leases(registry, self.kinds)
        self._limited = limits.limited_kinds(registry, self.kinds)
        self._limited_wait = limits.limited_wait(registry, self._limited)
        self._flights = flights
        self._gate = gate
        self._engine = engine
        self._supervisor = supervisor
        self._keeper = keeper
        self._counters = counters
        self._start = start
        self._emit = emit
        self._on_empty = on_empty
        self._wake = asyncio.Event()
        self._skip: set[int] = set()  # rows that broke a claim and could not be quarantined
        self._unexplained = 0  # claim failures in a row that no single row explained
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
            plan = ClaimPlan(limit, db, self.kinds, self._db_kinds, False, self._kind_leases)
        else:
            limit = total if self._free_kinds else 0
            plan = ClaimPlan(limit, 0, self._free_kinds, [], bool(self._db_kinds),
                             self._kind_leases)
        return plan if limit > 0 else None

    def refill_plan(self, finishing: int) -> ClaimPlan | None:
        """What a grouped completion of `finishing` flights may claim with it."""
        if not self.claiming or self._gate.paused:
            return None
        return self.plan(finishing)

    def adopt(self, jobs: Sequence[ClaimedJob], sent: float) -> None:
        """Start flights for jobs claimed by a statement sent at local time `sent`."""
        for job in jobs:
            kind = self._registry.find(job.kind)
            lease = self._settings.lease_for(kind.lease_seconds if kind else None)
            flight = Flight(
                job,
                kind,
                deadline=self._keeper.deadline_for(sent, lease),
                claimed_at=sent,
                lease_seconds=lease,
                renew_every=self._settings.renewal_for(lease),
            )
            self._flights.add(flight)
            self._counters.claimed += 1
            self._emit(
                Claimed(
                    self._worker_id,
                    job.id,
                    job.kind,
                    str(job.token),
                    job.attempt,
                    job.lease_expires_at,
                    str(job.previous_token) if job.previous_token else None,
                    job.previous_worker,
                    job.queue,
                    max(0.0, (job.db_now - job.run_at).total_seconds()),
                )
            )
            self._start(flight)
        if jobs:
            self._keeper.poke()

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
                    if not is_transient(exc):
                        await self._probe(exc, plan)
                        continue
                    else:
                        self._supervisor.trouble(CLAIMS, exc)
                        await asyncio.sleep(self._settings.retry_delay_cap)
                        continue
            self._supervisor.ok(CLAIMS)
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
            )
            limited = [k for k in self._limited if k in plan.kinds]
            if limited and len(claimed) < plan.limit:
                claimed += await self._claim_limited(conn, plan, limited, claimed)
            if len(claimed) < plan.limit:
                due = await leases.seconds_until_claimable(
                    conn, self._settings.queues, plan.kinds, limited, self._limited_wait)
                if due is not None:
                    wait_for = min(wait_for, due + WAKE_SLACK_SECONDS)
        return claimed, wait_for, sent

    async def _claim_limited(
        self, conn: Conn, plan: ClaimPlan, kinds: list[str], claimed: list[ClaimedJob]
    ) -> list[ClaimedJob]:
        """Jobs of limited kinds for the slots the ordinary claim left (see `limits`)."""
        holding = sum(1 for job in claimed if job.kind in plan.db_kinds)
        return await limits.claim_limited(
            conn,
            worker_id=self._worker_id,
            limit=plan.limit - len(claimed),
            lease_seconds=self._settings.lease_seconds,
            queues=self._settings.queues,
            kinds=kinds,
            skip=sorted(self._skip),
            db_kinds=plan.db_kinds,
            db_limit=max(0, plan.db_limit - holding),
            kind_leases=plan.kind_leases,
        )

    async def _probe(self, error: Exception, plan: ClaimPlan) -> None:
        """A claim failed on a row's account, perhaps: find it and put it aside."""
        found = await quarantine.probe(
            self._engine, worker_id=self._worker_id, lease_seconds=self._settings.lease_seconds,
            queues=self._settings.queues, kinds=plan.kinds, skip=sorted(self._skip),
            limit=plan.limit,
        )
        for job_id, q_exc in found.unquarantinable:
            self._skip.add(job_id)
            self._supervisor.trouble(CLAIMS, q_exc, action=f"skipping job {job_id} from now on")
        for job_id, reason in found.quarantined:
            self._quarantined(job_id, reason)
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


def own_leases(registry: KindRegistry, kinds: Sequence[str]) -> dict[str, float]:
    """The kinds among `kinds` that set their own lease, and its length."""
    found = (registry.find(name) for name in kinds)
    return {k.name: k.lease_seconds for k in found if k is not None and k.lease_seconds}


def _holds_connection(registry: KindRegistry, name: str) -> bool:
    kind = registry.find(name)
    return kind is not None and kind.writes_db
