"""What the crew, the drain and the registration use of the worker that made them.

`Worker` imports those three; naming the worker's parts here, as a Protocol, keeps them
from importing `worker` back, so the engine's modules import one another without a circle
(tests/test_architecture.py holds it, type-only imports included).
"""

from __future__ import annotations

from typing import Any, Protocol

from taskboard.core.engine.events import EventBus
from taskboard.core.engine.flights import FlightTable, PauseGate
from taskboard.core.engine.outcomes import WorkerCounters
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker_pool import ConnectionCheck
from taskboard.core.kinds.registry import KindRegistry


class WorkerParts(Protocol):
    """A running worker as its roles see it (`taskboard.core.engine.worker.Worker`)."""

    id: str
    url: str
    host: str
    settings: WorkerSettings
    registry: KindRegistry
    services: Any
    bus: EventBus
    counters: WorkerCounters
    flights: FlightTable
    gate: PauseGate
    pool_check: ConnectionCheck | None

    def drain(self) -> None: ...

    def heartbeat_fields(self) -> dict[str, Any]: ...

    def on_requests(self, pause: bool, drain: bool) -> None: ...
