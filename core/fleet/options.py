"""What `taskboard-tui`'s flags ask of a fleet: kept apart from the opening (which imports
the workers, the stand-ins and the web servers) so the flags are parsed without them."""

from __future__ import annotations

from dataclasses import dataclass

from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.runtime.metrics import DEFAULT_HOST


@dataclass(frozen=True)
class FleetOptions:
    """What `taskboard-tui`'s flags ask for."""

    workers: int
    settings: WorkerSettings
    demo: bool = False
    metrics_port: int | None = None  # serve Prometheus metrics of the embedded workers
    metrics_host: str = DEFAULT_HOST
    app: str | None = None  # --app MODULE:ATTR: the application's kinds (else TASKBOARD_APP)
    room: str | None = None
    """With `demo`: the browser session whose own database tells the story (made here,
    dropped on exit); None: the shared demo database, emptied on start."""
