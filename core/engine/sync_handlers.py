"""Plain `def` handlers: run in a bounded thread pool while the event loop keeps the lease.

A handler in a thread cannot be cut: when the worker stops its attempt (a lost lease, a
timeout, a cancel, a drain) the thread runs on, but from then on its every
`ctx.checkpoint()` and `ctx.external(...)` is refused. Both are decided on the event loop,
by the same checks an async handler's meet (pause gate, lost lease, local deadline), so a
thread's view of the lease is never older than the loop's. A call inside `ctx.external`
marks the attempt as in an external call, so it is never released or stopped mid-call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, NoReturn

from taskboard.core.base.errors import LeaseLost
from taskboard.core.engine.context import HandlerContext
from taskboard.core.kinds.registry import EffectRecord, EffectTicket, JsonObject
from taskboard.core.kinds.sync_context import SyncHandler

# Threads per worker for plain handlers; more such jobs wait for a thread (and are refused
# if their lease's local deadline passes meanwhile).
SYNC_HANDLER_THREADS = 16
# How often a thread waiting on the loop checks that the loop still runs.
LOOP_CHECK_SECONDS = 1.0


class SyncHandlers:
    """One worker's thread pool for plain handlers (made at the first one; its idle threads
    end when the worker is gone, and a thread whose handler never returns holds up the
    process's exit, as any non-daemon thread does)."""

    def __init__(self, threads: int = SYNC_HANDLER_THREADS) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, handler: SyncHandler, ctx: HandlerContext) -> Any:
        """Run `handler` in a thread; return what it returns, raise what it raises."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="taskboard-sync")
        bridge = ThreadContext(ctx, asyncio.get_running_loop())
        try:
            # In the attempt's context (run_in_executor does not carry it): the handler's
            # logs and spans belong to the attempt's trace.
            result: Any = await asyncio.get_running_loop().run_in_executor(
                self._pool, contextvars.copy_context().run, bridge.call, handler
            )
        finally:
            # The attempt is over for the worker, whether or not the thread is.
            bridge.closed = True
        if inspect.isawaitable(result):
            # A plain function returning an awaitable (`lambda ctx: work(ctx)`): nothing of
            # it has run yet, so it runs here as an async handler would.
            return await result
        return result


class ThreadContext:
    """The `SyncJobContext` of one attempt: the async context's promises, from a thread."""

    def __init__(self, ctx: HandlerContext, loop: asyncio.AbstractEventLoop) -> None:
        self._ctx = ctx
        self._loop = loop
        self.closed = False  # read and written on the loop only
        # The attempt's facts, fixed for its life (as `ThreadTicket` copies its ticket's).
        self.job_id = ctx.job_id
        self.kind = ctx.kind
        self.attempt = ctx.attempt
        self.identity = ctx.identity
        self.services: Any = ctx.services
        self.installation_id = ctx.installation_id

    @property
    def payload(self) -> JsonObject:
        # A fresh copy on each read, as the async context gives.
        return self._ctx.payload

    def call(self, handler: SyncHandler) -> Any:
        # The job may have waited for a thread: starting it is a checkpoint too.
        self.run_on_loop(self._checkpoint("starting the handler"))
        return handler(self)

    def checkpoint(self) -> None:
        self.run_on_loop(self._checkpoint("continuing"))

    @contextlib.contextmanager
    def external(self, what: str) -> Iterator[ThreadTicket]:
        call = self._ctx.external(what)
        ticket = self.run_on_loop(self._enter(call, what))
        try:
            yield ThreadTicket(ticket, self)
        finally:
            self.run_on_loop(call.__aexit__(None, None, None))

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.run_on_loop(self._step(name, fn, args, kwargs))

    def parent_results(self) -> dict[int, Any]:
        result: dict[int, Any] = self.run_on_loop(self._ctx.parent_results())
        return result

    def sleep(self, seconds: float) -> None:
        self.run_on_loop(self._ctx.sleep(seconds))

    def sleep_until(self, when: datetime | float) -> None:
        self.run_on_loop(self._ctx.sleep_until(when))

    def snooze(self, seconds: float) -> NoReturn:
        self._ctx.snooze(seconds)

    def note(self, message: str) -> None:
        self._loop.call_soon_threadsafe(self._ctx.note, message)

    async def _checkpoint(self, what: str) -> None:
        self._refuse_if_closed(what)
        await self._ctx.checkpoint()

    async def _step(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        self._refuse_if_closed(f"starting step {name!r}")
        return await self._ctx.step(name, fn, *args, **kwargs)

    async def _enter(
        self, call: contextlib.AbstractAsyncContextManager[EffectTicket], what: str
    ) -> EffectTicket:
        self._refuse_if_closed(f"starting {what}")
        return await call.__aenter__()

    def _refuse_if_closed(self, what: str) -> None:
        if self.closed:
            raise LeaseLost(f"job {self.job_id}: the worker stopped this attempt; not {what}")

    def run_on_loop(self, step: Coroutine[Any, Any, Any]) -> Any:
        """Run `step` on the worker's loop and wait for it (a paused worker's checkpoint
        may wait long); a loop that stopped refuses, so a thread never waits forever."""
        try:
            future = asyncio.run_coroutine_threadsafe(step, self._loop)
        except RuntimeError:  # the loop is closed
            step.close()
            raise LeaseLost(f"job {self.job_id}: the worker has stopped") from None
        while True:
            try:
                return future.result(timeout=LOOP_CHECK_SECONDS)
            except TimeoutError:
                if self._loop.is_closed() or not self._loop.is_running():
                    future.cancel()
                    raise LeaseLost(f"job {self.job_id}: the worker has stopped") from None


class ThreadTicket:
    """The `SyncEffectTicket` of one external call: the ticket's headers, and its record
    written on the loop while the thread waits (as an async handler awaits it)."""

    def __init__(self, ticket: EffectTicket, context: ThreadContext) -> None:
        self._ticket = ticket
        self._context = context
        self.job_id = ticket.job_id
        self.attempt = ticket.attempt
        self.deadline = ticket.deadline
        self.identity = ticket.identity

    def headers(self) -> dict[str, str]:
        return self._ticket.headers()

    def record(self, effect: EffectRecord) -> None:
        self._context.run_on_loop(self._ticket.record(effect))
