"""The training scenario follows the article's timeline and waits for the board, never guesses.

`DemoScript` lives in core and has no Textual; these tests drive it with the fixed board's
timeline (`demo_beats`) directly, and once through the dashboard's `n` key.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from taskboard.core.board import JobCounts
from taskboard.core.control import CommandRefused
from taskboard.core.training.scenario import DemoScript
from taskboard.tui.widgets.narration import Narration

from tests.tui.helpers import running
from tests.tui.sample_board import (
    DEMO_BILLING_JOB,
    DEMO_EMAIL_JOB,
    FixedBoard,
    claim,
    demo_beats,
    demo_start_board,
    demo_waiting_board,
    down,
    worker,
)


async def test_the_timeline_sends_enqueue_pause_resume_in_order() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    for beat in demo_beats():
        step = await script.advance(board, beat.before)
        assert script.status == "", script.status
        assert step is script.current
    assert script.finished
    assert board.commands == [
        ("enqueue_sample", "email"),
        ("enqueue_sample", "billing"),
        ("pause", "opsbox-1"),
        ("resume", "opsbox-1"),
    ]
    assert script.notes.email_job == DEMO_EMAIL_JOB
    assert script.notes.billing_job == DEMO_BILLING_JOB


async def test_narration_names_the_actual_workers_and_tokens() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    beats = demo_beats()
    for beat in beats[:3]:
        await script.advance(board, beat.before)
    # Step 3: B reclaimed with a new token, A's token reported as the previous one.
    assert script.current.title.startswith("3.")
    assert "opsbox-2" in script.narration and "b2b2b2b2" in script.narration
    assert "a1a1a1a1" in script.narration and "attempt 2" in script.narration
    assert "DUPLICATE" in script.narration
    await script.advance(board, beats[3].before)
    assert "lease_token = $2" in script.narration and "zero rows" in script.narration
    await script.advance(board, beats[4].before)
    assert "the fence rejected it" in script.narration
    assert "1 REPLAYED" in script.narration and "Idempotency-Key" in script.narration


async def test_last_step_tells_a_lost_lease_from_a_rejected_completion() -> None:
    # An engine whose resumed worker learns of the reclaim from its renewal never sends
    # the completion; the ending must not claim the fence rejected an UPDATE.
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    beats = demo_beats()
    for beat in beats[:4]:
        await script.advance(board, beat.before)
    done = beats[4].before
    lost = tuple(replace(f, outcome="lease_lost") for f in done.failures)
    await script.advance(board, replace(done, failures=lost))
    assert script.finished
    assert "never tried to complete" in script.narration
    assert "fence rejected" not in script.narration


async def test_reclaim_step_waits_while_the_stalled_lease_is_still_running() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    beats = demo_beats()
    await script.advance(board, beats[0].before)
    await script.advance(board, beats[1].before)
    sent = list(board.commands)
    step = await script.advance(board, demo_waiting_board())
    assert script.index == 2 and step is script.current
    assert script.status == f"waiting for A's lease on job #{DEMO_EMAIL_JOB} to expire (2s left)"
    assert board.commands == sent


async def test_stall_step_waits_until_a_worker_has_claimed_the_email_job() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    enqueued = replace(demo_start_board(), counts=JobCounts(pending=2))
    await script.advance(board, demo_start_board())
    await script.advance(board, enqueued)  # nobody has claimed it yet
    assert script.index == 1
    assert script.status == f"waiting for a worker to claim email job #{DEMO_EMAIL_JOB}"
    assert board.sent("pause") == []


async def test_stall_step_says_so_when_the_email_job_finished_too_fast_to_stall() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    finished = replace(demo_start_board(), counts=JobCounts(completed=2))
    await script.advance(board, demo_start_board())
    await script.advance(board, finished)
    assert script.index == 1
    assert script.status.startswith(f"email job #{DEMO_EMAIL_JOB} already finished")
    assert "press e for another email job" in script.status
    assert board.sent("pause") == []


async def test_stall_step_adopts_another_claimed_email_job() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    other = claim(777, "email", "opsbox-2", seconds_left=5, token_no=0x77, lease_seconds=10)
    await script.advance(board, demo_start_board())
    await script.advance(board, replace(demo_start_board(), claims=(other,), claims_total=1))
    assert script.index == 2
    assert script.notes.email_job == 777
    assert board.sent("pause") == ["opsbox-2"]
    assert "job #777" in script.narration


async def test_stall_step_adds_a_worker_when_nobody_could_reclaim() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    claimed = demo_beats()[1].before
    lonely = replace(claimed, workers=claimed.workers[:1])
    await script.advance(board, demo_start_board())
    await script.advance(board, lonely)
    assert board.sent("add_worker") == ["opsbox-11"]
    assert board.sent("pause") == ["opsbox-1"]
    assert "opsbox-11 was added to play B" in script.narration


async def test_steps_wait_for_the_database_and_for_a_first_snapshot() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    await script.advance(board, None)
    assert script.status == "waiting for the first refresh of the board"
    await script.advance(board, down(demo_start_board()))
    assert script.status == "waiting for the database to come back"
    assert script.index == 0 and board.commands == []


async def test_a_refused_command_propagates_and_the_script_stays_put() -> None:
    board = FixedBoard(demo_start_board(), refuse={"pause": "opsbox-1 is draining"})
    script = DemoScript()
    await script.advance(board, demo_start_board())
    with pytest.raises(CommandRefused, match="draining"):
        await script.advance(board, demo_beats()[1].before)
    assert script.index == 1


async def test_advancing_past_the_end_changes_nothing() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    for beat in demo_beats():
        await script.advance(board, beat.before)
    sent = list(board.commands)
    await script.advance(board, demo_beats()[-1].after)
    assert script.finished and script.status == "the scenario is over"
    assert board.commands == sent


async def test_resume_is_skipped_when_a_was_resumed_by_hand() -> None:
    board = FixedBoard(demo_start_board())
    script = DemoScript()
    beats = demo_beats()
    for beat in beats[:3]:
        await script.advance(board, beat.before)
    resumed = replace(beats[3].before, workers=(worker("opsbox-1"), worker("opsbox-2")))
    await script.advance(board, resumed)
    assert script.index == 4
    assert board.sent("resume") == []


async def test_n_key_advances_the_narration_panel_and_waits_visibly() -> None:
    board = FixedBoard(demo_start_board())
    async with running(board, demo=DemoScript()) as run:
        narration = run.app.query_one(Narration)
        assert "press n" in str(narration.render()).lower()
        beats = demo_beats()
        board.snapshot = beats[0].before
        await run.press("n")
        assert "1. Worker A claims the email job" in str(narration.render())
        board.snapshot = beats[1].before
        run.app.request_refresh()
        await run.press("n")
        board.snapshot = demo_waiting_board()
        run.app.request_refresh()
        await run.press("n")
        rendered = str(narration.render())
        assert "2. A stalls" in rendered
        assert "waiting for A's lease" in rendered
        assert board.sent("pause") == ["opsbox-1"]
