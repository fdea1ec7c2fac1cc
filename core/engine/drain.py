"""Draining a worker (SIGTERM, an operator's request, an unhealthy worker stopping).

1. Stop claiming; give in-flight work `drain_seconds` to finish (renewals go on).
2. Stop every handler that can be stopped without cutting anything (not started yet,
   cancel-safe, or waiting at a checkpoint), wait until it has stopped, and only then
   release its lease (fenced), so no handler still runs when another worker may claim the
   job. A job whose handler never started gets its attempt back.
3. A handler inside an external call that cannot be cut (an SMTP send, a Stripe request) is
   never released: the drain waits for it up to its lease's local deadline (renewing no
   more), lets it complete if it finishes, and otherwise leaves the lease to expire and says
   so, so the job runs again elsewhere after the deadline rather than while it still sends.
   A release the database does not take (an outage) leaves those leases to expire too.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskboard.core.engine.db_errors import describe
from taskboard.core.engine.events import LeftToExpire
from taskboard.core.engine.flights import Flight, Phase, Stop
from taskboard.core.engine.outcomes import Outcome
from taskboard.core.engine.registration import STOP_RECORD_SECONDS
from taskboard.core.engine.worker_parts import WorkerParts

if TYPE_CHECKING:
    from taskboard.core.engine.crew import Crew

log = logging.getLogger("taskboard.worker")

STOP_WAIT_SECONDS = 2.0


class Drain:
    """One drain of one worker."""

    def __init__(self, worker: WorkerParts, crew: Crew) -> None:
        self._worker = worker
        self._crew = crew

    async def run(self) -> None:
        crew = self._crew
        crew.producer.stop_claiming()
        if not self._worker.gate.paused:
            # A paused worker's handlers are stopped: release at once instead of waiting.
            await crew.flights.wait_empty(self._worker.settings.drain_seconds)
        await self._release_stoppable()
        # Whatever is left finishes its external call or its completion now; a paused
        # worker's completions go out (and meet the fence) rather than waiting for ever.
        self._worker.gate.open()
        await self._wait_unstoppable()

    def _running(self) -> list[Flight]:
        return [f for f in self._crew.flights if f.task is not None and not f.task.done()]

    async def _release_stoppable(self) -> None:
        stoppable = [f for f in self._running() if f.lost is None and f.stoppable]
        for flight in stoppable:
            flight.stop = Stop.DRAIN
            assert flight.task is not None
            flight.task.cancel()
        tasks = [f.task for f in stoppable if f.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
        stopped = [
            f for f in stoppable
            if f.task is not None and f.task.done() and self._crew.flights.holds(f)
        ]
        if not stopped:
            return
        try:
            # A stop's record, not worth an answer limit (11 s at the default lease) nor
            # the pool's wait for a connection (10 s) in an outage: a release that does not
            # go through in time leaves the leases to expire, as a refused one does (one
            # that did commit meanwhile only frees its jobs sooner than said).
            outcomes = await self._crew.completer.release(stopped, STOP_RECORD_SECONDS)
        except Exception as exc:
            log.warning(
                "release failed (%s); %d leases will expire", describe(exc), len(stopped),
                extra={"fields": {"msg": "release failed; leases will expire",
                                  "worker": self._worker.id, "error": describe(exc),
                                  "jobs": [f.job.id for f in stopped]}},
            )
            # Each job is told of too: whoever follows the drain (the dashboard's last
            # lines) counts it left to expire, not released.
            for flight in stopped:
                self._left_to_expire(flight, "drain: the release failed, left to expire")
            return
        await self._crew.reporter.report(outcomes)

    async def _wait_unstoppable(self) -> None:
        left = self._running()
        if not left:
            return
        for flight in left:
            flight.renewable = False  # the deadline is fixed now; wait for it, no longer
        loop = asyncio.get_running_loop()
        until = max(f.deadline for f in left)
        tasks = [f.task for f in left if f.task is not None]
        await asyncio.wait(tasks, timeout=max(0.0, until - loop.time()))
        abandoned = [f for f in left if f.task is not None and not f.task.done()]
        outcomes = []
        for flight in abandoned:
            what = "an external call" if flight.phase is Phase.EXTERNAL else "a handler"
            reason = f"drain: left to expire, {what} still running at the local deadline"
            flight.lost = reason
            flight.stop = Stop.DRAIN  # reported here; the stop only cancels the task
            job = flight.job
            self._left_to_expire(flight, reason)
            # Where the handler's task waits: a flight that never finishes names its await.
            awaiting = awaited_at(flight.task) if flight.task is not None else ""
            log.warning(
                "job %s left to expire (awaiting %s)", job.id, awaiting,
                extra={"fields": {"msg": "lease left to expire", "worker": self._worker.id,
                                  "job_id": job.id, "reason": reason, "awaiting": awaiting}},
            )
            outcomes.append(Outcome.lost(flight, reason))
        if outcomes:
            await self._crew.reporter.report(outcomes)

    def _left_to_expire(self, flight: Flight, reason: str) -> None:
        job = flight.job
        self._worker.bus.emit(LeftToExpire(self._worker.id, job.id, str(job.token), reason))


def awaited_at(task: asyncio.Task[None], frames: int = 8) -> str:
    """The innermost `frames` awaits `task` is suspended in, outermost first ("file:line
    function > ..."), followed down its chain of awaits (a task's own stack stops at its
    first coroutine): cheap, only when asked, and it names what a stuck flight waits on,
    which no event does."""
    found: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and len(found) < 64:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            break
        found.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} "
                     f"{frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return " > ".join(found[-frames:])
