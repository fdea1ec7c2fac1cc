"""The built-in kinds as the training scenario runs them: effects held until the script says
so, so the story happens in its order at any pace.

Real email and billing handlers finish in milliseconds, faster than a trainer can press a
key, and a hold of a fixed time is no better: a trainer who talks longer than the hold at
step 1 finds the job done before the stall. Here a job's handler, after its send, waits
for the script's cue (renewing its lease, as any long handler does):

- a run that started before the stall (A's: the others stand aside) waits until the stall
  (step 2): the script pauses A, then lets those runs go, and A stops at the completion
  (sent, not yet completed);
- a run that started after it (B's reclaim) waits until A came back and met the fence
  (step 6), so B still holds the job when step 5 says so and completes after A's rejected
  completion.

The handlers run on the workers' loop (a thread) and the script on the dashboard's, so the
cue is a lock-guarded stage, and letting go wakes each waiter on its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from typing import Any, cast

from taskboard.core.kinds import Handler, JobContext, KindRegistry, builtin_registry

HELD = 0
"""Every demo effect waits after its send."""
FIRST_CLAIMS = 1
"""A stalled: runs started before the stall go on (and a paused A stops at its completion)."""
ALL = 2
"""A came back: the runs started since go on too; nothing waits any more."""


class StoryCue:
    """How far the story lets the demo's handlers go (`HELD`, `FIRST_CLAIMS`, `ALL`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stage = HELD
        self._runs = 0  # handler runs started in this story
        self._stalled_at: int | None = None  # runs started before the stall
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    @property
    def stage(self) -> int:
        """The stage the story reached."""
        with self._lock:
            return self._stage

    def let_go(self, stage: int) -> None:
        """Let handlers go up to `stage` (never back: `reset` does that)."""
        with self._lock:
            if stage >= FIRST_CLAIMS and self._stalled_at is None:
                self._stalled_at = self._runs
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
            self._runs = 0
            self._stalled_at = None

    def enter(self) -> int:
        """A handler run starts; returns its number in the story."""
        with self._lock:
            self._runs += 1
            return self._runs

    def lets_go(self, run: int) -> bool:
        """Whether run number `run` may go on: all after A came back; before, those that
        started before the stall, once it happened."""
        with self._lock:
            if self._stage >= ALL:
                return True
            return self._stalled_at is not None and run <= self._stalled_at

    async def wait(self, run: int) -> None:
        """Return once run number `run` may go on."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.append(waiter)
        try:
            while not self.lets_go(run):
                waiter[1].clear()
                if self.lets_go(run):
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
            kind = dataclasses.replace(kind, handler=_held(cast(Handler, kind.handler), cue))
        registry.register(kind)
    return registry


def _held(handler: Handler, cue: StoryCue) -> Handler:
    async def held(ctx: JobContext) -> Any:
        run = cue.enter()
        result = await handler(ctx)
        await cue.wait(run)
        return result

    return held
