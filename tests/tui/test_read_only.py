"""A read-only tab (`taskboard-tui --read-only`, what `--serve` gives every tab but the one in
control): every key that would change anything is greyed and says why when pressed; the keys
that only look still work; and the control refuses commands even if a screen sends one."""

from __future__ import annotations

import pytest
from taskboard.core.view.control import CommandRefused
from taskboard.tui.read_only import READ_ONLY_REASON, read_only
from taskboard.tui.widgets.dead_jobs import DeadJobsTable

from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, main_board
from tests.tui.test_keys import select_row

CHANGES = ("p", "x", "d", "a", "e", "b", "s", "P")


async def test_every_key_that_changes_anything_is_greyed_with_the_reason() -> None:
    board = FixedBoard(main_board())
    async with running(board, read_only=READ_ONLY_REASON) as run:
        bindings = run.app.screen.active_bindings
        for key in CHANGES:
            assert bindings[key].enabled is False, key
        for key in ("j", "L", "question_mark", "q"):
            assert bindings[key].enabled is True, key
        await run.press(*CHANGES)
        await select_row(run, DeadJobsTable, "17")  # type: ignore[arg-type]
        await run.press("r")
        assert run.board.commands == []
        warnings = run.said("warning")
        assert len(warnings) == len(CHANGES) + 1
        assert all(message == READ_ONLY_REASON for message in warnings), warnings


async def test_the_control_of_a_read_only_tab_refuses_every_command() -> None:
    board = FixedBoard(main_board())
    control = read_only(board)
    assert (await control.refresh()).workers == board.snapshot.workers
    for command in (control.pause("w"), control.retry(17), control.enqueue_sample("email"),
                    control.reset_demo()):
        with pytest.raises(CommandRefused, match="read-only"):
            await command
    assert board.commands == []
