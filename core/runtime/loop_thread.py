"""An asyncio event loop of its own, in a daemon thread.

The dashboard runs its embedded workers here, not on the UI's loop: rendering a frame of a
large board is one synchronous stretch of tens of milliseconds, and a renewal timer on the
same loop waits for it to end. On their own loop the workers only share the interpreter
lock with the UI, which the UI thread hands over every `sys.getswitchinterval()` (5 ms).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Run coroutines and calls on a private loop; await their results from any other loop."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if not self._thread.is_alive() and not self.loop.is_closed():
            self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the loop is accepting work."""
        return self._thread.is_alive() and not self.loop.is_closed()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the thread's loop and return its result here.

        Cancelling the caller cancels `coro` on the other loop.
        """
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wrap_future(future)

    async def call(self, fn: Callable[[], T]) -> T:
        """Call `fn` on the thread's loop (objects bound to that loop live there)."""

        async def invoke() -> T:
            return fn()

        return await self.run(invoke())

    async def stop(self) -> None:
        """Stop the loop once what runs on it now has been cancelled, and join the thread."""
        if not self._thread.is_alive():
            if not self.loop.is_closed():
                self.loop.close()
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()
