"""A board that never says what is not so (issue 26): small promises of the dashboard."""

from __future__ import annotations

from taskboard.tui.screens.prompt import PromptScreen

from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, main_board
from tests.tui.sample_scenes import wait_for


async def test_escape_at_the_pause_reason_pauses_nothing() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("P")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen), "prompt")
        await run.press(*["backspace"] * 7, *"emails", "enter")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen)
                       and "Why pause" in run.app.screen.question, "the reason prompt")
        await run.press("escape")
        await wait_for(run.pilot, lambda: len(run.app.screen_stack) == 1, "back")
        assert [c for c, _ in run.board.commands if c == "pause_queue"] == []
