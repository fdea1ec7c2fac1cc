"""The jobs a worker holds right now, its slots, and its pause gate.

A `Flight` is one claimed job from its claim to its outcome. Its local deadline is the
worker's own clock's view of the lease: (local time the claim or renewal was *sent*) +
lease - margin, always earlier than the database's deadline. After it, no external effect
starts (`Flight.refuse`), and the lease keeper gives the lease up.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from psycopg import AsyncConnection
from taskboard.core.base.errors import LeaseLost
from taskboard.core.engine.records import ClaimedJob, Lease
from taskboard.core.engine.settings import DEFAULT_CLAIM_BYTES
from taskboard.core.kinds.registry import JobKind


class Phase(enum.Enum):
    """Where a flight's handler is, which decides what may be done to it."""

    CLAIMED = "claimed"  # claimed; the handler has not started (a drain may release it free)
    RUNNING = "running"  # the handler runs (stoppable if its kind is cancel-safe)
    EXTERNAL = "external"  # inside an external call that must not be cut (SMTP, Stripe)
    COMPLETING = "completing"  # the work is done; the fenced completion is under way


class Stop(enum.Enum):
    """Why the worker stopped a handler (it cancels the task only for these reasons)."""

    LOST = "lost"  # the lease was lost
    DRAIN = "drain"  # a drain releases the job
    CANCELLED = "cancelled"  # an operator cancelled the job
    TIMEOUT = "timeout"  # the handler ran past its job's timeout


class TimedOut(Exception):
    """The attempt ran past its timeout: the handler is stopped and the job fails."""


class DeadlinePassed(LeaseLost):
    """An action was refused because the lease's local deadline had passed."""

    def __init__(self, message: str, *, what: str, late: float) -> None:
        super().__init__(message)
        self.what = what
        self.late = late


@dataclass(eq=False)
class Flight:
    """One claimed job this worker holds."""

    job: ClaimedJob
    kind: JobKind | None
    deadline: float  # loop.time() after which this worker must not act for the job
    claimed_at: float  # loop.time() the claim was sent
    lease_seconds: float = 60.0  # this job's lease (its kind's, else the worker's)
    renew_every: float = 20.0  # seconds between its renewals
    renewal_sent: float | None = None  # loop.time() its last renewal that answered was sent
    phase: Phase = Phase.CLAIMED
    lost: str | None = None  # why the lease is lost; set once, never completes after
    stop: Stop | None = None
    at_checkpoint: bool = False  # waiting at a checkpoint: stopping it cuts nothing
    renewable: bool = True  # a drain stops renewing what it leaves to expire
    hold_seconds: float = 0.0  # training: keep the job after the work, before completing
    timed_out: float | None = None  # the timeout (seconds) the handler ran past
    ran_from: float | None = None  # loop.time() the handler started
    ran_until: float | None = None  # loop.time() it returned or raised
    min_margin: float | None = None  # least lease time left at a renewal (seconds)
    task: asyncio.Task[None] | None = None
    # The handler's own connection while it runs (kinds that write): closed, never
    # cancelled, when the lease is lost (see LeaseKeeper.lose).
    conn: AsyncConnection[Any] | None = None

    @property
    def lease(self) -> Lease:
        """(job id, token): what every fenced statement presents."""
        return self.job.lease

    @property
    def timing(self) -> tuple[float | None, float | None]:
        """(handler seconds, least margin at a renewal), recorded with the attempt."""
        took = None
        if self.ran_from is not None and self.ran_until is not None:
            took = self.ran_until - self.ran_from
        return took, self.min_margin

    @property
    def started(self) -> bool:
        """Whether the handler has started (a release then keeps the attempt counted)."""
        return self.phase is not Phase.CLAIMED

    @property
    def stoppable(self) -> bool:
        """Whether cancelling the handler now cuts no external call in half."""
        if self.phase is Phase.CLAIMED:
            return True
        if self.phase is Phase.EXTERNAL or self.phase is Phase.COMPLETING:
            return False
        return self.at_checkpoint or self.kind is None or self.kind.cancel_safe

    def refuse(self, what: str, now: float) -> None:
        """Raise `LeaseLost` if the lease is lost or its local deadline has passed, and
        `TimedOut` if the attempt ran past its timeout."""
        if self.timed_out is not None:
            raise TimedOut(f"timed out after {self.timed_out:g} s")
        if self.lost is not None:
            raise LeaseLost(f"job {self.job.id}: lease lost ({self.lost}); not {what}")
        if now >= self.deadline:
            late = now - self.deadline
            raise DeadlinePassed(
                f"job {self.job.id}: local lease deadline passed {late:.2f} s ago; not {what}",
                what=what,
                late=late,
            )


class PauseGate:
    """The training lever: while closed, claims, renewals and checkpoints wait."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        """True while closed."""
        return not self._open.is_set()

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    async def wait(self) -> None:
        """Return at once if open, else when it opens."""
        await self._open.wait()


@dataclass(frozen=True)
class ClaimPlan:
    """What one claim may bring back: `limit` jobs of `kinds`, at most `db_limit` of them
    of `db_kinds` (kinds whose handlers hold a connection)."""

    limit: int
    db_limit: int
    kinds: list[str]
    db_kinds: list[str]
    waits_for_connection: bool  # kinds that hold one were left out: none is free
    max_bytes: int = DEFAULT_CLAIM_BYTES  # payload bytes it may bring back (one row always)
    kind_leases: dict[str, float] = field(default_factory=dict)  # kinds' own leases


class Refill(Protocol):
    """What the completer needs from the producer to claim replacements in its commit."""

    def refill_plan(self, finishing: int) -> ClaimPlan | None: ...

    def adopt(self, jobs: Sequence[ClaimedJob], sent: float) -> None: ...

    def wake(self) -> None: ...

    def refill_failed(self, exc: BaseException) -> None: ...


@dataclass
class FlightTable:
    """The held jobs (by token: a worker may reclaim its own expired job, and the stale
    attempt and the new one must never be confused) and the slot accounting.

    Two limits: `capacity` jobs at once, and of those at most `connection_slots` of kinds
    that write to the database (each holds a pool connection while it runs). A claim in
    flight reserves what it may bring back in both, so two claims (the claim loop and a
    grouped completion's refill) never fill one slot twice.
    """

    capacity: int
    connection_slots: int
    _flights: dict[object, Flight] = field(default_factory=dict)
    _holding: int = 0  # flights of kinds that hold a connection
    _reserved: int = 0
    _reserved_connections: int = 0
    # Flights whose grouped completion is out: the group's own claim reserves their slots.
    _finishing: set[Flight] = field(default_factory=set)
    freed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, flight: Flight) -> None:
        self._flights[flight.job.token] = flight
        if _holds_connection(flight):
            self._holding += 1

    def remove(self, flight: Flight) -> bool:
        """Forget a finished flight; True if it was held. Wakes whoever waits for a slot."""
        if self._flights.get(flight.job.token) is flight:
            del self._flights[flight.job.token]
            self._finishing.discard(flight)
            if _holds_connection(flight):
                self._holding -= 1
            self.freed.set()
            return True
        return False

    def holds(self, flight: Flight) -> bool:
        return self._flights.get(flight.job.token) is flight

    def __len__(self) -> int:
        return len(self._flights)

    def __iter__(self) -> Iterator[Flight]:
        return iter(list(self._flights.values()))

    def live(self) -> list[Flight]:
        """Held flights whose lease is not known to be lost."""
        return [f for f in self._flights.values() if f.lost is None]

    @property
    def free_slots(self) -> int:
        """Slots neither held nor reserved by a claim in flight."""
        return self.capacity - len(self._flights) + len(self._finishing) - self._reserved

    @property
    def free_connection_slots(self) -> int:
        """Slots for kinds that hold a connection neither held nor reserved (`free_slots`
        bounds them too)."""
        return self.connection_slots - self._holding - self._reserved_connections

    @contextlib.contextmanager
    def reserve(self, slots: int, connection_slots: int = 0) -> Iterator[None]:
        """Count `slots` (`connection_slots` of them for kinds that write) as taken while
        a claim for them is in flight."""
        self._reserved += slots
        self._reserved_connections += connection_slots
        try:
            yield
        finally:
            self._reserved -= slots
            self._reserved_connections -= connection_slots

    @contextlib.contextmanager
    def finishing(self, flights: Sequence[Flight]) -> Iterator[None]:
        """Count `flights` as ended while the statement that ends them is out, whose claim
        has reserved their slots (`reserve`); a flight it leaves held (a busy row) counts
        again after. Without this a second group out at once would count them twice."""
        marked = [f for f in flights if self.holds(f)]
        self._finishing.update(marked)
        try:
            yield
        finally:
            self._finishing.difference_update(marked)

    async def wait_empty(self, timeout: float) -> bool:
        """Wait until nothing is held (or `timeout`); True if empty."""
        tasks = [f.task for f in self._flights.values() if f.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return not self._flights


def _holds_connection(flight: Flight) -> bool:
    return flight.kind is not None and flight.kind.writes_db


async def wait_at_checkpoint(flight: Flight, gate: PauseGate) -> None:
    """Where a paused worker's handler stops: while it waits here, stopping it cuts nothing."""
    if gate.paused:
        flight.at_checkpoint = True
        try:
            await gate.wait()
        finally:
            flight.at_checkpoint = False
