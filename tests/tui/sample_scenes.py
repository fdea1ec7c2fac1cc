"""Every screen of the dashboard, driven from the fixed board, for snapshots and screenshots.

Snapshot tests (`tests/tui/test_snapshots.py`) and `screenshots/generate.py` both render
these scenes, so the committed screenshots are exactly what the tests pin. A scene builds
its app (`live=False`: one refresh, no timer; a frozen clock) and a `prepare` coroutine
that brings the app to the screen to capture, waiting on conditions rather than time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from taskboard.core.training.scenario import DemoScript
from taskboard.core.view.board import BoardSnapshot, LinkHealth
from taskboard.tui.app import TaskboardApp
from taskboard.tui.screens.help import HelpScreen
from textual.pilot import Pilot

from tests.tui.demo_board import DEMO_MOMENTS, DONE, DemoBoard
from tests.tui.sample_board import (
    FixedBoard,
    FrozenClock,
    down,
    main_board,
)

WIDE = (120, 40)
"""The help, database-down and demo snapshot size."""

SMALL = (80, 24)
"""The classic terminal size, to catch layouts that only work when wide."""

LARGE = (160, 45)
"""A large terminal: spare height must go to the failures and the dead jobs."""

HUGE = (220, 60)
"""A very large terminal."""

DB_DOWN_ERROR = (
    'connection failed: connection to server at "db.internal" (10.0.4.12), port 5432 '
    "failed: Connection refused"
)
"""What a failed refresh reports in the db-down scene."""

SETTLE_SECONDS = 10.0
"""Upper bound for a scene to settle; reaching it means the app is stuck, not slow."""

PilotT = Pilot[None]


async def settle(pilot: PilotT) -> None:
    """Wait until no refresh, command or demo step is in flight and the screen is drawn."""
    app = pilot.app
    assert isinstance(app, TaskboardApp)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    quiet = 0
    # Two quiet passes in a row: a finishing refresh may schedule one more via call_later.
    while quiet < 2:
        if loop.time() > deadline:
            raise TimeoutError("the dashboard did not settle")
        await pilot.pause()
        try:
            # Bounded: a command stuck on a gate must fail the test, not hang the run.
            await asyncio.wait_for(app.workers.wait_for_complete(), deadline - loop.time())
        except TimeoutError:
            raise TimeoutError("the dashboard did not settle") from None
        busy = app.refreshing or any(worker.is_running for worker in app.workers)
        quiet = 0 if busy else quiet + 1
    await pilot.pause()


async def wait_for(
    pilot: PilotT, predicate: Callable[[], bool], what: str, seconds: float = SETTLE_SECONDS
) -> None:
    """Poll `predicate` between frames until it holds; fail naming `what` at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await pilot.pause()


async def show_board(pilot: PilotT, board: FixedBoard, snapshot: BoardSnapshot) -> None:
    """Make the board serve `snapshot`, refresh, and wait for it to be drawn."""
    app = pilot.app
    assert isinstance(app, TaskboardApp)
    board.snapshot = snapshot
    app.request_refresh()
    await settle(pilot)


async def play_demo(pilot: PilotT, board: DemoBoard, steps: int) -> None:
    """Press `n` `steps` times, each at the moment of the story it is first allowed
    (`DEMO_MOMENTS`); then show the board at the moment of the next press (the end, after
    the last), whose status says what that press will do."""
    app = pilot.app
    assert isinstance(app, TaskboardApp) and app.demo is not None
    for moment in DEMO_MOMENTS[:steps]:
        before = app.demo.index
        await show_board(pilot, board, board.at(moment))
        await pilot.press("n")
        await settle(pilot)
        if app.demo.index != before + 1:
            raise AssertionError(f"demo step {before + 1} did not run: {app.demo.status}")
    await show_board(pilot, board, board.at((*DEMO_MOMENTS, DONE)[steps]))


@dataclass
class Scene:
    """One screen to capture: how to build the app and bring it to that screen."""

    name: str
    """File stem for the screenshot, e.g. `main` or `demo-step-3`."""
    size: tuple[int, int]
    """Terminal (columns, rows)."""
    board: FixedBoard
    """The control the app talks to; tests inspect its recorded commands."""
    app: TaskboardApp
    """The app, not yet running."""
    prepare: Callable[[PilotT], Awaitable[None]]
    """Brings the running app to the screen to capture."""


THEME = "textual-dark"
"""Pinned so a developer's TEXTUAL_THEME cannot change the screenshots."""


def _app(board: FixedBoard, clock: FrozenClock, demo: DemoScript | None = None) -> TaskboardApp:
    app = TaskboardApp(
        board,
        clock=clock,
        live=False,
        mode_label="demo" if demo is not None else "",
        demo=demo,
    )
    app.theme = THEME
    return app


def main_scene(size: tuple[int, int] = WIDE, name: str = "main") -> Scene:
    """The dashboard over the main fixture."""
    board = FixedBoard(main_board())
    return Scene(name, size, board, _app(board, FrozenClock()), settle)


def help_scene() -> Scene:
    """The help screen over the main fixture."""
    board = FixedBoard(main_board())

    async def prepare(pilot: PilotT) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), "help screen")
        await settle(pilot)

    return Scene("help", WIDE, board, _app(board, FrozenClock()), prepare)


DB_SILENT = LinkHealth(
    last_answer_age=7.0,
    waiting_for="refreshing the board",
    waiting_seconds=2.4,
    last_error="no answer from the database within 3 s (refreshing the board)",
)
"""A link 7 s after the database's last answer, its third refresh waiting."""


def db_down_scene(size: tuple[int, int] = WIDE, name: str = "db-down") -> Scene:
    """The last good board under the health banner, 7 s after the database's last answer,
    while another refresh waits."""
    board = FixedBoard(main_board())
    clock = FrozenClock()

    async def prepare(pilot: PilotT) -> None:
        await settle(pilot)
        clock.advance(7)
        board.link = DB_SILENT
        await show_board(pilot, board, down(main_board(), DB_DOWN_ERROR))

    return Scene(name, size, board, _app(board, clock), prepare)


def demo_scene(step: int) -> Scene:
    """The training scenario after `step` presses of `n` (0 = the introduction), over the
    story as dated events (`tests/tui/demo_board.py`): worker-a plays A, worker-b plays B."""
    board = DemoBoard()

    async def prepare(pilot: PilotT) -> None:
        await settle(pilot)
        await play_demo(pilot, board, step)

    return Scene(
        f"demo-step-{step}", WIDE, board, _app(board, FrozenClock(), DemoScript()), prepare
    )


DEMO_STEPS = len(DEMO_MOMENTS)
"""Steps of the training scenario after the introduction (one press of n each)."""


def all_scenes() -> list[Scene]:
    """Every screen, freshly built (apps run once)."""
    return [
        main_scene(WIDE, "main"),
        main_scene(SMALL, "small-80x24"),
        main_scene(LARGE, "main-160x45"),
        main_scene(HUGE, "main-220x60"),
        help_scene(),
        *(demo_scene(step) for step in range(DEMO_STEPS + 1)),
        replace(demo_scene(1), size=SMALL, name="demo-80x24"),
        db_down_scene(),
        db_down_scene(SMALL, "db-down-80x24"),
    ]
