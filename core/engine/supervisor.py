"""Supervision of a worker's roles: no loop ends unseen.

Each role (claims, completions, renewals, deadlines, control) runs under `Supervisor.spawn`.
A role waits out transient database errors itself and says so through `trouble()`; anything
else it does not expect escapes to the supervisor, which logs one JSON line naming the role,
the statement and the error, backs off and runs the role again. When an unexpected error
keeps coming back for longer than one lease, the worker is unhealthy: `on_unhealthy` is
called once with the role and the error (the worker records it in its row, says so on the
dashboard, and from the command line drains and exits non-zero so a process supervisor
restarts it).

A burst worker (`unreachable_after` set) also gives up on the database: when transient
errors (the database unreachable) keep coming for that long, `on_unreachable` is called once,
so a batch run ends with an error instead of retrying for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from taskboard.core.engine.db_errors import describe, is_transient, statement_of

log = logging.getLogger("taskboard.worker")

FIRST_RETRY_SECONDS = 0.1


class Supervisor:
    """Runs roles, restarts them after unexpected errors, and judges the worker's health."""

    def __init__(
        self,
        worker_id: str,
        *,
        unhealthy_after: float,
        retry_cap: float,
        on_unhealthy: Callable[[str, str], None],
        unreachable_after: float | None = None,
        on_unreachable: Callable[[str, str], None] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.unhealthy_after = unhealthy_after
        self.retry_cap = retry_cap
        self._on_unhealthy = on_unhealthy
        self._streaks: dict[str, float] = {}  # role -> when its current error streak began
        self.unreachable_after = unreachable_after
        self._on_unreachable = on_unreachable
        self._outages: dict[str, float] = {}  # role -> when its transient streak began
        self._reported = False
        self.last_error: str | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def spawn(self, role: str, body: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run `body` as role `role` until it returns (the role was told to stop)."""
        task = asyncio.get_running_loop().create_task(self._run(role, body), name=role)
        self._tasks.append(task)
        return task

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The role tasks spawned so far."""
        return list(self._tasks)

    async def _run(self, role: str, body: Callable[[], Awaitable[None]]) -> None:
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.trouble(role, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_cap)

    def trouble(
        self, role: str, exc: BaseException, *, action: str = "retrying", handled: bool = False
    ) -> None:
        """Log one line for an error of `role`, and count it towards unhealthy if unexpected.

        `handled`: the role already dealt with it (a row quarantined): a warning, no streak.
        """
        transient = is_transient(exc)
        fields = {
            "msg": "database unavailable" if transient else "unexpected error",
            "worker": self.worker_id,
            "role": role,
            "statement": statement_of(exc),
            "error": describe(exc),
            "action": action,
        }
        if transient or handled:
            log.warning("%s: %s", role, fields["error"], extra={"fields": fields})
            if transient and self.unreachable_after is not None:
                self._outage(role, exc)
            return
        log.error("%s: %s", role, fields["error"], extra={"fields": fields})
        self.last_error = f"{role}: {describe(exc)}"
        now = asyncio.get_running_loop().time()
        began = self._streaks.setdefault(role, now)
        if now - began >= self.unhealthy_after and not self._reported:
            self._reported = True
            self._on_unhealthy(role, self.last_error)

    def _outage(self, role: str, exc: BaseException) -> None:
        now = asyncio.get_running_loop().time()
        began = self._outages.setdefault(role, now)
        assert self.unreachable_after is not None
        if now - began >= self.unreachable_after and not self._reported:
            self._reported = True
            self.last_error = f"{role}: {describe(exc)}"
            if self._on_unreachable is not None:
                self._on_unreachable(role, self.last_error)

    def ok(self, role: str) -> None:
        """`role` just succeeded: its error streak, if any, is over."""
        self._streaks.pop(role, None)
        self._outages.pop(role, None)
