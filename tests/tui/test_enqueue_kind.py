"""`E` enqueues a job of any kind the dashboard offers, with a payload the operator types;
the payload is checked (JSON object, then the kind's validation) before the question closes."""

from __future__ import annotations

from taskboard.tui.screens.prompt import PromptScreen
from textual.widgets import Input, Static

from tests.tui.helpers import Run, running
from tests.tui.sample_board import FixedBoard


def _error(run: Run) -> str:
    return str(run.app.screen.query_one("#prompt-error", Static).render())


async def _answer(run: Run, text: str) -> None:
    run.app.screen.query_one(Input).value = text
    await run.press("enter")


async def test_a_payload_is_refused_in_the_question_until_the_kind_takes_it() -> None:
    board = FixedBoard()
    async with running(board) as run:
        await run.press("E")
        assert isinstance(run.app.screen, PromptScreen)
        await _answer(run, "nosuch")
        assert "no kind 'nosuch' here: billing, email, noop, sleep" in _error(run)
        await _answer(run, "sleep")
        asked = run.app.screen
        assert isinstance(asked, PromptScreen) and "sleep job" in asked.question
        assert asked.query_one(Input).value == '{"seconds": 5.0}'  # the kind's sample
        await _answer(run, "[1, 2]")
        assert "must be a JSON object, got list" in _error(run)
        await _answer(run, "{seconds: 1}")
        assert _error(run).startswith("not JSON:")
        await _answer(run, "{}")
        assert _error(run) == "seconds: is required"
        assert board.sent("enqueue_job") == []
        await _answer(run, '{"seconds": 0.5}')
        assert not isinstance(run.app.screen, PromptScreen)
        assert board.sent("enqueue_job") == [("sleep", {"seconds": 0.5})]
        assert any(m.startswith("Enqueued sleep job #") for m in run.said())


async def test_the_enqueue_kind_key_is_greyed_in_a_read_only_tab() -> None:
    board = FixedBoard()
    async with running(board, read_only="read-only here") as run:
        await run.press("E")
        assert not isinstance(run.app.screen, PromptScreen)
        assert "read-only here" in run.said("warning")
