"""The one narrow interface between the dashboard and the engine.

The dashboard reads `BoardSnapshot`s and sends commands through a `BoardControl`; it never
touches a connection, a worker object or SQL. `taskboard.core.fleet.Fleet` is the real
implementation (embedded workers plus the database); tests may drive the UI with a fixed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from taskboard.core.board import BoardSnapshot


class CommandRefused(Exception):
    """A command that makes no sense in the current state; the message says why."""


class BoardControl(Protocol):
    """Commands the dashboard may send. Each raises `CommandRefused` with a reason."""

    async def refresh(self) -> BoardSnapshot:
        """Read the board. On a lost database, return a snapshot with `connected=False`."""
        ...

    def embedded_worker_ids(self) -> list[str]:
        """Workers that run in this process (they can be crashed or have pool stats)."""
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

    async def retry(self, job_id: int) -> None:
        """Make a dead job pending again."""
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


class Scenario(Protocol):
    """A training scenario the dashboard narrates (`taskboard.core.training` has the
    article's); `n` calls `advance`."""

    @property
    def finished(self) -> bool:
        """True once the last step is current."""
        ...

    def progress(self) -> ScenarioProgress:
        """The current step, narrated."""
        ...

    async def advance(self, control: BoardControl, snapshot: BoardSnapshot | None) -> object:
        """Perform the next step against the board (or say what it waits for)."""
        ...
