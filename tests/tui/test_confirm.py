"""The confirmation asked before retry, cancel and crash: only an explicit yes confirms."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from taskboard.tui.screens.confirm import ConfirmScreen
from textual.widgets import Button, Static

from tests.tui.fakes_screens import LARGE, SMALL, Hosted, confirm_scene, hosting

SnapCompare = Callable[..., bool]
QUESTION = "Retry dead job #42 (billing on payments)? It may charge the customer again."


async def ask(run: Hosted) -> list[bool | None]:
    """Push the question; the list receives the answer."""
    answers: list[bool | None] = []
    run.app.push_screen(ConfirmScreen(QUESTION, yes="Retry job #42"), answers.append)
    await run.until(lambda: isinstance(run.app.focused, Button), "the question, No focused")
    return answers


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (("y",), True),
        (("n",), False),
        (("escape",), False),
        (("q",), False),
        (("enter",), False),  # No has the focus: a stray Enter never confirms
        (("left", "enter"), True),  # moved to the yes button, then Enter
        (("tab", "tab", "enter"), False),  # tab wraps yes -> No; Enter on No
    ],
)
async def test_only_an_explicit_yes_confirms(keys: tuple[str, ...], expected: bool) -> None:
    async with hosting(size=SMALL) as run:
        answers = await ask(run)
        await run.pilot.press(*keys)
        await run.until(lambda: answers, "an answer")
        assert answers == [expected]
        assert not isinstance(run.app.screen, ConfirmScreen)


@pytest.mark.parametrize(("button", "expected"), [("#yes", True), ("#no", False)])
async def test_a_click_on_either_button_answers(button: str, expected: bool) -> None:
    async with hosting(size=SMALL) as run:
        answers = await ask(run)
        await run.pilot.click(button)
        await run.until(lambda: answers, "an answer")
        assert answers == [expected]


async def test_the_question_and_the_yes_label_are_shown_whole_at_80x24() -> None:
    async with hosting(size=SMALL) as run:
        await ask(run)
        screen = run.app.screen
        assert str(screen.query_one("#confirm-question", Static).render()).replace(
            "\n", " "
        ) == QUESTION
        yes = screen.query_one("#yes", Button)
        assert str(yes.label) == "Retry job #42"
        assert yes.region.right <= SMALL[0] and yes.region.bottom <= SMALL[1]
        assert screen.query_one("#no", Button).has_focus


def test_snapshot_80x24(snap_compare: SnapCompare) -> None:
    scene = confirm_scene(SMALL)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


def test_snapshot_160x45(snap_compare: SnapCompare) -> None:
    scene = confirm_scene(LARGE)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)
