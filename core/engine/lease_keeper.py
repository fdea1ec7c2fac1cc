"""The lease keeper: renews every held lease in one statement per interval, and enforces
each lease's local deadline on the worker's own clock.

Two loops, because one of them must never wait on the database: `renewals` sends RENEW and
may wait up to the answer limit for a slow or frozen server; `deadlines` only reads the
clock, so a lease whose renewal never came back is given up at its local deadline however
the database behaves. A lease is lost when renewal finds another token or an expired lease,
when a renewal's answer arrives after the local deadline, or when the deadline passes with
no renewal answered. Losing a lease stops its handler where that cuts nothing (see
`Flight.stoppable`); the others are refused at their next checkpoint or external call.
Flights whose completion is under way are left to the completion's own verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from taskboard.core.base import tracing_attempts
from taskboard.core.base.closing import close_under_waiter
from taskboard.core.engine import attempt_log, leases
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import is_transient
from taskboard.core.engine.events import Event, RenewalFailed, Renewed
from taskboard.core.engine.flights import Flight, FlightTable, PauseGate, Phase, Stop
from taskboard.core.engine.outcomes import WorkerCounters
from taskboard.core.engine.records import Lease, Verdict
from taskboard.core.engine.settings import WorkerSettings, margin_for
from taskboard.core.engine.supervisor import Supervisor

RENEWALS = "renewals"
DEADLINES = "deadlines"


class LeaseKeeper:
    """Renewals and local deadlines for one worker's flights."""

    def __init__(
        self,
        *,
        worker_id: str,
        settings: WorkerSettings,
        flights: FlightTable,
        gate: PauseGate,
        engine: HeldConnection,
        supervisor: Supervisor,
        counters: WorkerCounters,
        emit: Callable[[Event], None],
    ) -> None:
        self._worker_id = worker_id
        self._settings = settings
        self._flights = flights
        self._gate = gate
        self._engine = engine
        self._supervisor = supervisor
        self._counters = counters
        self._emit = emit
        self._poked = asyncio.Event()
        self._retick = asyncio.Event()
        # What each loop waits for now: new flights that change neither wake neither, so
        # adopting a job costs O(1) here, however many are held (both loops look at every
        # held flight when they wake).
        self._watching: float | None = None  # the earliest local deadline `deadlines` sleeps to
        self._interval = settings.renewal_interval  # the renewal tick `renewals` keeps
        self._unrecorded: list[tuple[Lease, str]] = []

    def deadline_for(self, sent: float, lease: float | None = None) -> float:
        """The local deadline of a lease of `lease` seconds (None: the worker's) whose
        claim or renewal was sent at `sent`."""
        lease = self._settings.lease_seconds if lease is None else lease
        return sent + lease - margin_for(lease)

    def poke(self, deadline: float | None = None, renew_every: float | None = None) -> None:
        """Flights were added (the earliest of their local deadlines and the shortest of
        their renewal intervals), or the worker resumed (no arguments): look at the
        deadlines again if one comes sooner than the one watched, and at the renewal
        interval if a kind's shorter lease shortens it."""
        if deadline is None or self._watching is None or deadline < self._watching:
            self._poked.set()
        if renew_every is None or renew_every < self._interval:
            self._retick.set()

    def _tick(self) -> float:
        """Seconds between renewal statements: the worker's interval, or the shortest
        interval of a lease held now (one statement still renews every lease due)."""
        own = [f.renew_every for f in self._flights.live() if f.renewable]
        self._interval = min([self._settings.renewal_interval, *own])
        return self._interval

    @staticmethod
    def _due(flight: Flight, now: float, tick: float) -> bool:
        """Whether `flight`'s lease is renewed by the statement sent now: every tick for
        leases renewed at the tick's pace (the worker's own, whatever their age), else
        once its own interval would pass before the next tick."""
        if flight.renew_every <= tick * 1.001:
            return True
        last = flight.renewal_sent if flight.renewal_sent is not None else flight.claimed_at
        return now + tick >= last + flight.renew_every

    # --- renewals ------------------------------------------------------------------------

    async def renewals(self) -> None:
        """Renew every interval; after a pause, at once (a resumed worker first learns what
        it lost)."""
        loop = asyncio.get_running_loop()
        last = loop.time()
        next_due = last + self._tick()
        while True:
            self._retick.clear()
            wait = next_due - loop.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._retick.wait(), wait)
                if self._retick.is_set():
                    # A flight came in: a kind's shorter lease may bring the next one nearer.
                    next_due = min(next_due, max(loop.time(), last + self._tick()))
                    continue
            interval = self._tick()
            last = loop.time()
            if self._gate.paused:
                await self._gate.wait()
                next_due = loop.time()
            lateness = max(0.0, loop.time() - next_due)
            self._counters.renewal_lateness.append(lateness)
            try:
                await self.renew_once(lateness)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._supervisor.trouble(RENEWALS, exc)
                next_due = loop.time() + min(self._settings.retry_delay_cap, interval / 4)
                continue
            self._supervisor.ok(RENEWALS)
            next_due += interval
            if next_due < loop.time():
                next_due = loop.time() + interval

    async def renew_once(self, lateness: float = 0.0) -> None:
        """One RENEW for every held lease that is not known lost and is due (see `_due`)."""
        loop = asyncio.get_running_loop()
        tick = self._tick()
        flights = [f for f in self._flights.live()
                   if f.renewable and self._due(f, loop.time(), tick)]
        if flights:
            async with self._engine.use("renewal") as conn:
                # Stamped with the connection in hand, not before: time spent waiting for
                # the engine lock or a connection used up nothing of the database's lease.
                sent = loop.time()
                verdicts = await leases.renew(
                    conn, [f.lease for f in flights], lease_seconds=self._settings.lease_seconds,
                    own=[f.lease_seconds for f in flights],
                )
            answered = loop.time()
            self._counters.renewal_statements += 1
            self._judge(flights, verdicts, sent, answered, lateness)
        await self._record_failures()

    def _judge(
        self,
        flights: list[Flight],
        verdicts: dict[Lease, Verdict],
        sent: float,
        answered: float,
        lateness: float,
    ) -> None:
        renewed: list[int] = []
        for flight in flights:
            if not self._flights.holds(flight) or flight.lost is not None:
                continue  # finished (or lost) while the statement was out
            verdict = verdicts.get(flight.lease, Verdict.REJECTED)
            completing = flight.phase is Phase.COMPLETING
            if verdict is Verdict.DONE:
                if answered >= flight.deadline and not completing:
                    late = answered - flight.deadline
                    self.lose(flight, f"renewal answered {late:.2f} s after the local deadline",
                              how="renewal answered late")
                    continue
                # What was left of the database's lease when this renewal set out: the
                # kind's margin, for lease advice.
                left = flight.deadline + margin_for(flight.lease_seconds) - sent
                if not completing:
                    low = flight.min_margin
                    flight.min_margin = left if low is None else min(left, low)
                if left < flight.lease_seconds - 1.5 * flight.renew_every:
                    # Half an interval or more behind its schedule: the margin that shrank.
                    tracing_attempts.renewal_late(flight, left, lateness)
                flight.deadline = max(flight.deadline,
                                      self.deadline_for(sent, flight.lease_seconds))
                flight.renewal_sent = sent
                renewed.append(flight.job.id)
            elif verdict is Verdict.CANCELLED:
                self.stop_cancelled(flight)
            elif verdict is Verdict.REJECTED and not completing:
                # A completion under way gets its own verdict from the fence; anything else
                # missing here was reclaimed, cancelled, or expired unrenewed.
                self.lose(flight, "renewal found the token changed or the lease expired",
                          how="renewal rejected")
            # BUSY: another session holds the row locked. Still ours as far as anyone can
            # tell; renewed next time, or given up at its local deadline.
        self._counters.renewals_ok += len(renewed)
        if renewed:
            self._emit(Renewed(self._worker_id, tuple(renewed), None, lateness))

    async def _record_failures(self) -> None:
        failures, self._unrecorded = self._unrecorded, []
        if not failures:
            return
        try:
            async with self._engine.use("recording renewal failures") as conn:
                await attempt_log.record_renewal_failed(conn, failures)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._unrecorded = failures + self._unrecorded  # the next renewal tries again

    # --- local deadlines -----------------------------------------------------------------

    async def deadlines(self) -> None:
        """Give up every lease whose local deadline passes with no renewal answered."""
        loop = asyncio.get_running_loop()
        while True:
            await self._gate.wait()  # a paused worker's clock is stalled, like the process
            self._poked.clear()
            now = loop.time()
            watched = [f for f in self._flights.live() if f.phase is not Phase.COMPLETING]
            for flight in watched:
                if now >= flight.deadline:
                    since = now - flight.deadline + flight.lease_seconds
                    tracing_attempts.local_deadline(flight, "renewal", now - flight.deadline)
                    self.lose(
                        flight,
                        f"local deadline passed: no renewal answered for {since:.1f} s",
                        how="local deadline",
                    )
            upcoming = [f.deadline for f in watched if f.lost is None]
            self._watching = min(upcoming) if upcoming else None
            wait = max(0.0, self._watching - loop.time()) if self._watching is not None else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), wait)

    # --- loss ----------------------------------------------------------------------------

    def stop_cancelled(self, flight: Flight) -> None:
        """An operator cancelled the job (its attempt is already recorded `cancelled`): not
        a lost lease, nothing to report as a renewal failure; stop the handler if that cuts
        nothing, else it is refused at its next checkpoint or external call."""
        if flight.stop is not None or flight.lost is not None:
            return
        flight.lost = "cancelled by operator"
        flight.stop = Stop.CANCELLED
        if flight.task is not None and flight.stoppable:
            _stop_handler(flight)

    def lose(self, flight: Flight, reason: str, how: str = "lost") -> None:
        """The lease is gone: never complete it; stop the handler if that cuts nothing."""
        if flight.lost is not None:
            return
        flight.lost = reason
        tracing_attempts.lease_lost(flight, reason, how)
        self._counters.renewals_failed += 1
        job = flight.job
        self._emit(RenewalFailed(self._worker_id, job.id, str(job.token), reason))
        self._unrecorded.append((flight.lease, reason))
        if flight.task is not None and flight.stoppable and flight.stop is None:
            flight.stop = Stop.LOST
            _stop_handler(flight)


def _stop_handler(flight: Flight) -> None:
    """Cancel the handler, closing its connection first: its transaction is rolled back
    either way, and a statement cancelled on a connection that no longer answers would
    wait for psycopg's cancel (seconds) where closing costs nothing."""
    if flight.conn is not None:
        close_under_waiter(flight.conn)
    if flight.task is not None:
        flight.task.cancel()
