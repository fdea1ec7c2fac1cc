"""The one narrow interface between the dashboard and the engine.

The dashboard reads `BoardSnapshot`s and sends commands through a `BoardControl`; it never
touches a connection, a worker object or SQL. `taskboard.core.fleet.Fleet` is the real
implementation (embedded workers plus the database); tests may drive the UI with a fixed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from taskboard.core.operations.job_bulk import BulkResult, Preview
from taskboard.core.view.board import BoardSnapshot, JobDetail, JobListRow, LinkHealth
from taskboard.core.view.health import HealthReport
from taskboard.core.view.lease_judgement import KindPolicies


class CommandRefused(Exception):
    """A command that makes no sense in the current state; the message says why."""


@dataclass(frozen=True)
class KindOffer:
    """A kind the dashboard's enqueue keys offer: the app's (`--app`) or a built-in one."""

    name: str
    app: bool  # the loaded app's own kind (False: a built-in one)
    sample: dict[str, Any] | None  # a payload the kind accepts, when one is known
    needs: str | None  # why an empty payload is refused ("side: is required"), if it is


class BoardControl(Protocol):
    """Commands the dashboard may send. Each raises `CommandRefused` with a reason."""

    async def refresh(self) -> BoardSnapshot:
        """Read the board. On a lost database, return a snapshot with `connected=False`."""
        ...

    def embedded_worker_ids(self) -> list[str]:
        """Workers that run in this process now (they can be crashed or paused at once)."""
        ...

    def started_here(self) -> frozenset[str]:
        """Every worker this dashboard started, running or stopped (labelled "here")."""
        ...

    def health(self) -> LinkHealth:
        """How the database link stands now: last answer's age, what it waits for. No I/O."""
        ...

    async def pause(self, worker_id: str) -> None:
        """Ask a worker to pause: it stops renewing and claiming, handlers stop at an await."""
        ...

    async def resume(self, worker_id: str) -> None:
        """Ask a paused worker to resume."""
        ...

    async def drain(self, worker_id: str) -> None:
        """Ask a worker to stop claiming, finish or release in-flight work, and leave."""
        ...

    async def add_worker(self) -> str:
        """Start one more embedded worker; returns its id."""
        ...

    async def crash(self, worker_id: str) -> None:
        """Stop an embedded worker at once, without releasing its leases (they must expire)."""
        ...

    async def enqueue_sample(self, kind: str) -> int:
        """Enqueue one sample job of `kind` (email, billing, sleep); returns its id."""
        ...

    def enqueue_kinds(self) -> tuple[KindOffer, ...]:
        """The kinds a job may be enqueued of from here, the app's first. No I/O."""
        ...

    def payload_problem(self, kind: str, payload: object) -> str | None:
        """Why enqueue would refuse `payload` for `kind`, in one line; None if it would
        take it. No I/O."""
        ...

    async def enqueue_job(self, kind: str, payload: dict[str, Any]) -> int:
        """Enqueue one job of `kind` with `payload` (validated as at any enqueue)."""
        ...

    async def retry(self, job_id: int) -> None:
        """Make a dead or cancelled job pending again."""
        ...

    async def cancel_job(self, job_id: int) -> None:
        """Cancel an unfinished job; a worker running it stops within a second."""
        ...

    async def pause_queue(self, queue: str, reason: str | None = None) -> None:
        """Stop claims from `queue` across the fleet (in-flight jobs finish)."""
        ...

    async def resume_queue(self, queue: str) -> None:
        """Let claims take from a paused queue again."""
        ...

    async def job_detail(self, job_id: int) -> JobDetail:
        """One job: payload (secrets masked), every attempt, its emails and charges."""
        ...

    async def list_jobs(self, state: str, needle: str | None = None) -> list[JobListRow]:
        """Jobs in a state (pending, scheduled, running, completed, dead, cancelled),
        filtered by kind, queue, id or error text."""
        ...

    async def lease_advice(self) -> list[KindPolicies]:
        """Per kind: its policies (lease, timeout, attempts) and fleet limits, its recorded
        timings, and `taskboard advise`'s verdict on its lease."""
        ...

    async def preview_all(self, action: str, state: str, needle: str | None) -> Preview:
        """How many jobs in `state` matching `needle` (as `list_jobs` filters) `action`
        ("retry" or "cancel") would act on now, and the first ids. Writes nothing."""
        ...

    async def act_on_all(self, action: str, state: str, needle: str | None) -> BulkResult:
        """Retry or cancel every job in `state` matching `needle`, in bounded batches that
        re-check each row; each job's history records it."""
        ...

    async def queue_health(self) -> HealthReport:
        """Whether PostgreSQL can clean up after the queue: dead rows, the oldest snapshot's
        holder, slots, the claims' recent mean time; graded, with what to do."""
        ...

    async def reset_demo(self, workers: int = 2) -> None:
        """Demo only: empty the demo database and start `workers` fresh workers."""
        ...


@dataclass(frozen=True)
class ScenarioProgress:
    """Where a training scenario stands, for the narration panel."""

    index: int
    total: int
    title: str
    narration: str
    status: str
    finished: bool
    ready: bool = False  # `status` says the board is where the next step needs it: `n` acts


class Scenario(Protocol):
    """A training scenario the dashboard narrates (`taskboard.core.training` has the
    article's); `n` calls `advance`."""

    @property
    def finished(self) -> bool:
        """True once the last step is current."""
        ...

    def restart(self) -> None:
        """Back to the first step, everything learned forgotten (after `reset_demo`)."""
        ...

    def observe(self, snapshot: BoardSnapshot) -> None:
        """Bring the narration up to date with the latest board (sends no command): what
        the current step waits for, or that it is ready for `n`. Called on every refresh."""
        ...

    def progress(self) -> ScenarioProgress:
        """The current step, narrated."""
        ...

    async def advance(self, control: BoardControl, snapshot: BoardSnapshot | None) -> object:
        """Perform the next step against the board (or say what it waits for)."""
        ...
