"""What a plain `def` handler gets: `SyncJobContext`, the blocking twin of `JobContext`.

The handler runs in the worker's bounded thread pool while the event loop keeps renewing
its lease; every call here is decided on that loop (see `engine.sync_handlers`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from taskboard.core.kinds.registry import EffectRecord, JobFacts


class SyncEffectTicket(Protocol):
    """`EffectTicket` for a plain handler: the same headers, and `record` that blocks."""

    @property
    def job_id(self) -> int: ...

    @property
    def attempt(self) -> int: ...

    @property
    def deadline(self) -> float: ...

    @property
    def identity(self) -> str: ...

    def headers(self) -> dict[str, str]:
        """`X-Taskboard-*` headers for an email or an HTTP request."""
        ...

    def record(self, effect: EffectRecord) -> None:
        """As `EffectTicket.record`: what the other side answered, committed on its own."""
        ...


class SyncJobContext(JobFacts, Protocol):
    """`JobContext` with blocking calls, for a plain `def` handler."""

    def checkpoint(self) -> None:
        """As `JobContext.checkpoint`: blocks while the worker is paused; raises `LeaseLost`
        once the lease is lost, its local deadline has passed or the attempt was stopped."""
        ...

    def external(self, what: str) -> AbstractContextManager[SyncEffectTicket]:
        """As `JobContext.external`, as a plain `with` block."""
        ...

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """As `JobContext.step`, blocking: `fn` (a plain function) runs in a worker thread
        under the same rules, and its JSON result (or the recorded one) is returned."""
        ...

    def parent_results(self) -> dict[int, Any]:
        """As `JobContext.parent_results`, blocking."""
        ...

    def sleep(self, seconds: float) -> None:
        """As `JobContext.sleep` (the handler stops here and resumes in a later claim)."""
        ...

    def sleep_until(self, when: datetime | float) -> None:
        """As `JobContext.sleep_until`."""
        ...


SyncHandler = Callable[[SyncJobContext], Any]
