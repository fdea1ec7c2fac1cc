"""Keys send the right command to the selected worker or job, or say why they cannot."""

from __future__ import annotations

from dataclasses import replace

from taskboard.tui.screens.help import HelpScreen
from taskboard.tui.widgets.workers import WorkersTable
from textual.command import CommandList, CommandPalette

from tests.tui.helpers import Run, running
from tests.tui.sample_board import FixedBoard, down, empty_board, main_board, worker
from tests.tui.sample_scenes import wait_for


async def select_worker(run: Run, worker_id: str) -> None:
    """Move the workers table cursor to `worker_id` with the arrow keys."""
    table = run.app.query_one(WorkersTable)
    table.focus()
    for _ in range(table.row_count):
        selected = run.app.selected_worker
        if selected is not None and selected.id == worker_id:
            return
        await run.press("down")
    raise AssertionError(f"worker {worker_id} not reachable in the workers table")


async def test_p_pauses_the_selected_running_worker() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-1")
        await run.press("p")
        assert run.board.commands == [("pause", "opsbox-1")]
        assert run.said("information") == ["Pausing opsbox-1"]


async def test_p_on_a_paused_worker_resumes_it() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-2")
        await run.press("p")
        assert run.board.commands == [("resume", "opsbox-2")]


async def test_footer_names_what_p_will_do_for_the_selected_worker() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-1")
        assert run.app.screen.active_bindings["p"].binding.description == "Pause worker"
        await select_worker(run, "opsbox-2")
        assert run.app.screen.active_bindings["p"].binding.description == "Resume worker"


async def test_p_with_no_worker_selected_notifies_and_sends_nothing() -> None:
    async with running(FixedBoard(empty_board())) as run:
        assert run.app.selected_worker is None
        assert run.app.screen.active_bindings["p"].enabled is False
        await run.press("p")
        assert run.board.commands == []
        assert len(run.said("warning")) == 1
        assert "No worker selected" in run.said("warning")[0]


async def test_enqueue_keys_send_enqueue_sample_of_each_kind() -> None:
    async with running(FixedBoard(main_board(), next_job_id=500)) as run:
        await run.press("e", "b", "s")
        assert run.board.sent("enqueue_sample") == ["email", "billing", "sleep"]
        assert run.said("information") == [
            "Enqueued email job #500",
            "Enqueued billing job #501",
            "Enqueued sleep job #502",
        ]


async def test_refused_command_is_a_warning_and_the_app_keeps_running() -> None:
    board = FixedBoard(main_board(), refuse={"pause": "opsbox-1 is draining"})
    async with running(board) as run:
        await select_worker(run, "opsbox-1")
        await run.press("p")
        assert run.said("warning") == ["opsbox-1 is draining"]
        assert run.app.is_running
        # The UI still works after the refusal.
        await run.press("e")
        assert run.board.sent("enqueue_sample") == ["email"]


async def test_unexpected_error_is_an_error_notification_not_a_crash() -> None:
    board = FixedBoard(main_board(), fail={"add_worker": RuntimeError("pool exhausted")})
    async with running(board) as run:
        await run.press("a")
        assert run.said("error") == ["RuntimeError: pool exhausted"]
        assert run.app.is_running
        assert run.app.return_code is None


async def test_crash_is_refused_for_a_worker_in_another_process() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "batch-07")
        await run.press("x")
        assert run.board.sent("crash") == []
        assert "not in this process" in run.said("warning")[0]


async def test_crash_and_drain_target_the_selected_embedded_worker() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-1")
        await run.press("x")
        await select_worker(run, "opsbox-2")
        await run.press("d")
        assert run.board.commands == [("crash", "opsbox-1"), ("drain", "opsbox-2")]


async def test_r_retries_the_selected_dead_job() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("r")
        assert run.board.sent("retry") == [17]


async def test_keys_that_need_the_database_are_greyed_out_while_it_is_down() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        board.snapshot = down(main_board())
        run.app.request_refresh()
        await run.press()
        assert run.app.screen.active_bindings["e"].enabled is False
        await run.press("e", "r")
        assert run.board.commands == []
        assert all("unreachable" in message for message in run.said("warning"))
        assert len(run.said("warning")) == 2


async def test_next_step_is_hidden_outside_demo_mode() -> None:
    async with running(FixedBoard(main_board())) as run:
        assert "n" not in run.app.screen.active_bindings
        await run.press("n")
        assert run.board.commands == []


async def test_palette_entry_that_cannot_run_says_why() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-1")
        entries = {title: help_text for title, help_text, _ in run.app.palette_entries()}
        assert entries["Resume worker"].startswith("unavailable: Worker opsbox-1 is running")
        run.app.perform("resume_worker")
        await run.press()
        assert run.board.commands == []
        assert "not paused" in run.said("warning")[0]
        run.app.perform("pause_worker")
        await run.press()
        assert run.board.commands == [("pause", "opsbox-1")]


async def test_help_lists_every_key_and_closes_on_escape() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("question_mark")
        help_screen = run.app.screen
        assert isinstance(help_screen, HelpScreen)
        keys = [key for key, _, _ in help_screen.keys]
        assert keys == ["p", "p", "a", "x", "d", "e", "b", "s", "r", "?", "q"]
        await run.press("escape")
        assert not isinstance(run.app.screen, HelpScreen)


async def test_selection_survives_refreshes_that_change_rows() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        await select_worker(run, "batch-07")
        snapshot = main_board()
        # A new worker appears and opsbox-1 leaves: the cursor must stay on batch-07.
        board.snapshot = replace(
            snapshot, workers=(*snapshot.workers[1:], worker("opsbox-3", heartbeat_age=0))
        )
        run.app.request_refresh()
        await run.press()
        selected = run.app.selected_worker
        assert selected is not None and selected.id == "batch-07"


async def test_q_quits() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.pilot.press("q")
        await run.pilot.pause()
        assert not run.app.is_running


async def test_command_palette_runs_pause_worker() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-1")
        await run.pilot.press("ctrl+p")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, CommandPalette), "palette")
        await run.pilot.press(*"pause worker")
        palette = run.app.screen
        assert isinstance(palette, CommandPalette)
        await wait_for(
            run.pilot,
            lambda: palette.query_one(CommandList).option_count > 0,
            "palette hits",
        )
        await run.press("down", "enter")
        await wait_for(run.pilot, lambda: bool(run.board.commands), "the pause command")
        assert run.board.commands == [("pause", "opsbox-1")]
