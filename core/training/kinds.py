"""The built-in kinds as the training scenario runs them: effects held until the script says
so, so the story happens in its order at any pace.

Real email and billing handlers finish in milliseconds, faster than a trainer can press a
key, and a hold of a fixed time is no better: a trainer who talks longer than the hold at
step 1 finds the job done before the stall. Here a job's handler, after its send, waits
for the script's cue (renewing its lease, as any long handler does):

- a first claim waits until the stall (step 2): the script pauses A, then lets A's
  handlers go, and A stops at the completion (sent, not yet completed);
- a reclaim (B's) waits until A came back and met the fence (step 6), so B still holds
  the job when step 5 says so and completes after A's rejected completion.

The handlers run on the workers' loop (a thread) and the script on the dashboard's, so the
cue is a lock-guarded stage, and letting go wakes each waiter on its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading

from taskboard.core.kinds import Handler, JobContext, KindRegistry, builtin_registry

HELD = 0
"""Every demo effect waits after its send."""
FIRST_CLAIMS = 1
"""A stalled: first claims go on (and a paused A stops at its completion)."""
ALL = 2
"""A came back: reclaims go on too; nothing waits any more."""


class StoryCue:
    """How far the story lets the demo's handlers go (`HELD`, `FIRST_CLAIMS`, `ALL`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stage = HELD
        self._entered: dict[int, int] = {}  # job id -> handler runs started in this story
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    @property
    def stage(self) -> int:
        """The stage the story reached."""
        with self._lock:
            return self._stage

    def let_go(self, stage: int) -> None:
        """Let handlers go up to `stage` (never back: `reset` does that)."""
        with self._lock:
            self._stage = max(self._stage, stage)
            waiters = list(self._waiters)
        for loop, event in waiters:
            # A waiter whose loop has closed has nobody left to wake.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def reset(self) -> None:
        """A new story: every effect waits again."""
        with self._lock:
            self._stage = HELD
            self._entered.clear()

    def enter(self, job_id: int) -> int:
        """A handler run of `job_id` starts: the stage that lets it go (a job's first run in
        this story is the first claim; any later one, a reclaim)."""
        with self._lock:
            runs = self._entered.get(job_id, 0)
            self._entered[job_id] = runs + 1
            return FIRST_CLAIMS if runs == 0 else ALL

    async def wait(self, stage: int) -> None:
        """Return once the story reached `stage`."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.append(waiter)
        try:
            while self.stage < stage:
                waiter[1].clear()
                if self.stage >= stage:
                    break
                await waiter[1].wait()
        finally:
            with self._lock:
                self._waiters.remove(waiter)


def demo_registry(cue: StoryCue) -> KindRegistry:
    """The built-in kinds, where those with an external effect wait for `cue` after their
    send. The work is done before the wait, so a worker stalled there and resumed sends
    its completion late and meets the fence, as a stalled process would."""
    base = builtin_registry()
    registry = KindRegistry()
    for name in base.names():
        kind = base.get(name)
        if kind.external_effect and kind.handler is not None:
            kind = dataclasses.replace(kind, handler=_held(kind.handler, cue))
        registry.register(kind)
    return registry


def _held(handler: Handler, cue: StoryCue) -> Handler:
    async def held(ctx: JobContext) -> None:
        stage = cue.enter(ctx.job_id)
        await handler(ctx)
        await cue.wait(stage)

    return held
