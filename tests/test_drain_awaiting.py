"""The drain's warning about a handler it leaves running names where that task waits."""

from __future__ import annotations

import asyncio

from taskboard.core.engine.drain import awaited_at


async def test_the_await_a_task_waits_on_is_named_down_its_chain() -> None:
    release = asyncio.Event()

    async def store() -> None:
        await release.wait()

    async def handler() -> None:
        await store()

    task = asyncio.ensure_future(handler())
    await asyncio.sleep(0)
    where = awaited_at(task)
    # Outermost first, down to the innermost coroutine (a task's own stack stops at its
    # first frame).
    assert where.startswith("test_drain_awaiting.py:"), where
    assert [part.split()[-1] for part in where.split(" > ")][:3] == ["handler", "store", "wait"]
    assert len(awaited_at(task, frames=1).split(" > ")) == 1
    release.set()
    await task
