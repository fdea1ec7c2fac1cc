"""The training scenario follows the article's timeline, tells it from the job's history at
any pace, and never shows a wait that is over.

`DemoScript` lives in core and has no Textual; these tests drive it over `DemoBoard` (the
story as dated events, `tests/tui/demo_board.py`), and through the dashboard's `n` key.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from taskboard.core.training.scenario import DemoScript
from taskboard.core.training.story import ANSWER
from taskboard.core.view.board import BoardSnapshot, ClaimRow
from taskboard.core.view.control import CommandRefused
from taskboard.tui.widgets.narration import Narration
from textual.content import Content

from tests.tui.demo_board import (
    BACK,
    CLAIMED,
    DEMO_MOMENTS,
    DONE,
    EMAIL,
    EXPIRED,
    FAST,
    PAUSED,
    RECLAIMED,
    SLOW,
    START,
    TOKEN_A,
    DemoBoard,
    demo_board_at,
)
from tests.tui.helpers import running
from tests.tui.sample_board import down
from tests.tui.sample_scenes import settle

EXPECTED_COMMANDS = [
    ("pause", "worker-b"),  # stands aside so that worker-a takes the jobs and plays A
    ("enqueue_sample", "email"),
    ("enqueue_sample", "billing"),
    ("pause", "worker-a"),  # A stalls
    ("resume", "worker-b"),  # back to play B
    ("resume", "worker-a"),  # A comes back
]


def said(script: DemoScript) -> str:
    """Everything the panel shows: title, narration and status."""
    progress = script.progress()
    return f"{progress.title}\n{progress.narration}\n{progress.status}"


async def press(script: DemoScript, board: DemoBoard, times: int = 1) -> None:
    """n pressed `times` times on the current board, observing the board before each."""
    for _ in range(times):
        script.observe(board.snapshot)
        assert "?" not in said(script), said(script)
        await script.advance(board, board.snapshot)
        assert "?" not in said(script), said(script)


async def play(board: DemoBoard, moments: list[float], presses: int = 1) -> DemoScript:
    """Move the world to each moment and press n there `presses` times."""
    script = DemoScript()
    for moment in moments:
        board.at(moment)
        await press(script, board, presses)
        script.observe(board.snapshot)
    return script


async def test_the_timeline_sends_each_command_once_however_often_n_is_pressed() -> None:
    board = DemoBoard()
    script = await play(board, list(DEMO_MOMENTS), presses=4)
    assert script.finished
    assert board.commands == EXPECTED_COMMANDS


async def test_a_slow_trainer_hears_b_from_the_history_after_b_finished() -> None:
    # The run: a long wait before n; B reclaimed and completed the job meanwhile.
    board = DemoBoard(world=SLOW)
    script = await play(board, [START, CLAIMED, EXPIRED])
    board.at(-13.0)  # B completed at -14; A still paused
    await press(script, board)
    assert script.current.title.startswith("4.")
    text = said(script)
    assert "B (worker-b) reclaimed job #101 from worker-a" in text
    assert "b2b2b2b2 (claim 2)" in text
    for moment in (-12.5, BACK, DONE):
        board.at(moment)
        await press(script, board)
    assert script.finished
    assert board.commands == EXPECTED_COMMANDS


async def test_the_fence_is_told_with_when_a_came_back_and_when_b_claimed() -> None:
    board = DemoBoard()
    script = await play(board, list(DEMO_MOMENTS[:6]))
    assert script.current.title.startswith("6.")
    # A came back at -11.9 (09:26:41.1), B claimed at -18.4 (09:26:34.6).
    assert "came back at 09:26:41.1, 6.5s after B's claim at 09:26:34.6" in script.narration
    assert "rejected" in script.narration


async def test_the_ending_names_who_sent_each_copy_and_answers_the_question() -> None:
    board = DemoBoard()
    script = await play(board, list(DEMO_MOMENTS))
    text = script.narration
    assert "copy 1 by worker-a (claim 1) at 09:26:23" in text
    assert "copy 2 by worker-b (claim 2) at 09:26:34" in text
    assert f"{ANSWER}, only that A no longer owned the job." in text
    assert "Billing: 1 charge; the reclaim's request replayed it (no new charge)." in text


async def test_a_lost_lease_is_not_told_as_a_rejected_completion() -> None:
    board = DemoBoard(world=replace(FAST, a_fence="lease_lost"))
    script = await play(board, list(DEMO_MOMENTS[:6]))
    assert "lease was lost, so A never sent its completion" in script.narration
    assert "rejected" not in script.narration


async def test_n_pressed_early_waits_and_the_status_follows_the_board() -> None:
    board = DemoBoard()
    script = await play(board, [START, CLAIMED])
    board.at(PAUSED)
    await press(script, board, 3)  # too early: A's lease is still running
    assert script.index == 2
    assert script.status == f"A's lease on job #{EMAIL} runs out in 6s (A no longer renews)"
    assert not script.progress().ready
    assert board.sent("resume") == []  # B stays aside: the row will show EXPIRED
    script.observe(board.at(EXPIRED))
    assert script.status == f"A's lease on job #{EMAIL} EXPIRED at 09:26:34.0: n brings B in"
    assert script.progress().ready
    await press(script, board)
    assert script.index == 3 and board.sent("resume") == ["worker-b"]
    assert "A's lease ran out at 09:26:34.0" in script.narration
    assert "worker-b steps back in to play B" in script.narration
    await press(script, board, 2)  # nobody has reclaimed yet
    assert script.index == 3
    assert script.status.endswith("EXPIRED at 09:26:34.0, waiting for a reclaim")
    # B reclaimed: the wait must not stay on screen.
    script.observe(board.at(RECLAIMED))
    assert "waiting" not in script.status
    assert script.status.startswith(f"worker-b reclaimed job #{EMAIL} from worker-a")
    assert script.progress().ready


async def test_a_board_read_before_the_latest_fact_changes_no_status() -> None:
    board = DemoBoard()
    script = await play(board, [START, CLAIMED, EXPIRED, RECLAIMED])
    before = script.status
    # A refresh that started before B's claim ends after the step: it tells the past.
    script.observe(demo_board_at(FAST, PAUSED))
    assert script.status == before


async def test_stall_waits_until_a_worker_has_claimed_the_email_job() -> None:
    board = DemoBoard()
    script = await play(board, [START])
    board.at(-29.95)  # enqueued, not claimed yet
    await press(script, board)
    assert script.index == 1
    assert script.status == f"waiting for a worker to claim email job #{EMAIL}"
    assert board.sent("pause") == ["worker-b"]


async def test_stall_says_so_when_the_email_job_finished_too_fast_to_stall() -> None:
    board = DemoBoard(world=replace(FAST, a_done=-29.0))
    script = await play(board, [START])
    board.at(-28.0)
    await press(script, board)
    assert script.index == 1
    assert script.status.startswith(f"email job #{EMAIL} finished before the stall")
    assert "e enqueues another" in script.status
    assert board.sent("pause") == ["worker-b"]


async def test_a_worker_is_added_to_play_b_when_a_works_alone() -> None:
    board = DemoBoard(with_b=False)
    script = await play(board, [START, CLAIMED, EXPIRED])
    assert board.sent("add_worker") == ["worker-b"]
    assert board.sent("pause") == ["worker-a"]
    assert "worker-b was added to play B" in script.narration


async def test_steps_wait_for_the_database_and_for_a_first_snapshot() -> None:
    board = DemoBoard()
    script = DemoScript()
    await script.advance(board, None)
    assert script.status == "waiting for the first refresh of the board"
    await script.advance(board, down(board.snapshot))
    assert script.status == "waiting for the database to come back"
    assert script.index == 0 and board.commands == []
    script.observe(down(board.snapshot))
    assert script.status == "waiting for the database to come back"


async def test_a_refused_command_propagates_and_a_retry_sends_nothing_twice() -> None:
    board = DemoBoard(refuse={"enqueue_sample": "queue default is paused"})
    script = DemoScript()
    with pytest.raises(CommandRefused, match="paused"):
        await script.advance(board, board.snapshot)
    assert script.index == 0
    board.refuse.clear()
    await script.advance(board, board.snapshot)
    assert script.index == 1
    assert board.commands == EXPECTED_COMMANDS[:3]


async def test_a_resumed_by_hand_is_not_resumed_again() -> None:
    board = DemoBoard()
    script = await play(board, [START, CLAIMED, EXPIRED, RECLAIMED])
    board.refuse["resume"] = "worker-a is running, not paused"
    board.at(RECLAIMED)
    resumed = replace(board.snapshot, workers=tuple(
        replace(w, state="running") for w in board.snapshot.workers
    ))
    await script.advance(board, resumed)
    assert script.index == 5


async def test_advancing_past_the_end_changes_nothing() -> None:
    board = DemoBoard()
    script = await play(board, list(DEMO_MOMENTS))
    sent = list(board.commands)
    await script.advance(board, board.snapshot)
    assert script.finished and script.status == "the scenario is over"
    assert board.commands == sent


async def test_restart_tells_the_story_again_from_the_start() -> None:
    board = DemoBoard()
    script = await play(board, list(DEMO_MOMENTS))
    script.restart()
    assert script.index == 0 and script.status == "" and script.notes.email_job is None
    board.commands.clear()
    board.next_job_id = EMAIL
    for moment in list(DEMO_MOMENTS):
        board.at(moment)
        await press(script, board)
    assert script.finished and board.commands == EXPECTED_COMMANDS


def test_no_narration_shows_a_placeholder_before_its_facts_are_known() -> None:
    script = DemoScript()
    for index in range(len(script.steps)):
        script.index = index
        assert "?" not in script.narration, script.narration
        assert "None" not in script.narration, script.narration


def _fits(narration: Narration) -> tuple[int, int]:
    """(lines the narration needs at its width, lines it has)."""
    region = narration.content_region
    content = narration.visual
    assert isinstance(content, Content)
    return len(content.wrap(region.width)), region.height


async def test_n_key_tells_the_whole_story_and_every_step_fits_80x24() -> None:
    board = DemoBoard()
    async with running(board, demo=DemoScript(), size=(80, 24)) as run:
        narration = run.app.query_one(Narration)
        script = run.app.demo
        assert isinstance(script, DemoScript)
        for moment in list(DEMO_MOMENTS):
            board.at(moment)
            run.app.request_refresh()
            await settle(run.pilot)
            index = script.index
            await run.press("n")
            assert script.index == index + 1, script.status
            rendered = str(narration.render())
            assert script.current.title in rendered and "?" not in rendered
            needed, room = _fits(narration)
            assert needed <= room, f"step {script.index} needs {needed} lines, has {room}"
            if script.index == 3:  # the deadline, from the board the step decided on
                assert "A's lease ran out at 09:26:34.0" in rendered
        assert ANSWER in str(narration.render())
        assert board.commands == EXPECTED_COMMANDS


def test_demo_board_tells_the_same_story_as_its_history() -> None:
    # The fixture itself: A's claim row holds A's token until B's claim, then B's.
    assert _email_claim(demo_board_at(FAST, CLAIMED)).token == TOKEN_A
    assert _email_claim(demo_board_at(FAST, RECLAIMED)).reclaimed_from == "worker-a"


def _email_claim(board: BoardSnapshot) -> ClaimRow:
    return next(c for c in board.claims if c.job_id == EMAIL)
