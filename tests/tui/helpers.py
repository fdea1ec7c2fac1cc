"""Running the dashboard over a `FixedBoard` in tests, and reading what it told the user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from taskboard.core.training.scenario import DemoScript
from taskboard.tui.app import TaskboardApp
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot

from tests.tui.sample_board import FixedBoard, FrozenClock
from tests.tui.sample_scenes import settle


@dataclass
class Run:
    """A running app, its pilot, its board, and every notification it posted."""

    app: TaskboardApp
    pilot: Pilot[None]
    board: FixedBoard
    clock: FrozenClock
    notifications: list[Notify] = field(default_factory=list)

    def said(self, severity: str | None = None) -> list[str]:
        """Messages of the notifications so far, optionally of one severity."""
        return [
            n.notification.message
            for n in self.notifications
            if severity is None or n.notification.severity == severity
        ]

    async def press(self, *keys: str) -> None:
        """Press keys and wait until every command they started has finished."""
        await self.pilot.press(*keys)
        await settle(self.pilot)


@asynccontextmanager
async def running(
    board: FixedBoard,
    *,
    size: tuple[int, int] = (120, 40),
    live: bool = False,
    refresh_seconds: float = 1.0,
    demo: DemoScript | None = None,
    settle_first: bool = True,
    read_only: str | None = None,
) -> AsyncIterator[Run]:
    """Run the dashboard headless over `board` until the block ends.

    Unless `live` or `settle_first=False`, the first refresh has been drawn on entry.
    """
    clock = FrozenClock()
    app = TaskboardApp(board, clock=clock, live=live, refresh_seconds=refresh_seconds, demo=demo,
                       read_only=read_only)
    notifications: list[Notify] = []

    def hook(message: Message) -> None:
        if isinstance(message, Notify):
            notifications.append(message)

    async with app.run_test(size=size, message_hook=hook) as pilot:
        run = Run(app, pilot, board, clock, notifications)
        if settle_first and not live:
            await settle(pilot)
        yield run
