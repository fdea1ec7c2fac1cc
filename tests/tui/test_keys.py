"""Keys send the right command for the focused table's row, ask first when a command cannot
be taken back, or say why they cannot run."""

from __future__ import annotations

from dataclasses import replace

from taskboard.core.training.scenario import DemoScript
from taskboard.core.view.control import BoardControl
from taskboard.tui.actions import ACTIONS
from taskboard.tui.screens.advice import AdviceScreen
from taskboard.tui.screens.confirm import ConfirmScreen
from taskboard.tui.screens.help import HelpScreen
from taskboard.tui.screens.job_detail import JobDetailScreen
from taskboard.tui.screens.jobs import JobsScreen
from taskboard.tui.screens.prompt import PromptScreen
from taskboard.tui.widgets.claims import ClaimsTable
from taskboard.tui.widgets.dead_jobs import DeadJobsTable
from taskboard.tui.widgets.failures import FailuresLog
from taskboard.tui.widgets.keyed_table import KeyedTable
from taskboard.tui.widgets.workers import WorkersTable
from textual.command import CommandList, CommandPalette

from tests.tui.demo_board import CLAIMED, START, DemoBoard
from tests.tui.helpers import Run, running
from tests.tui.sample_board import FixedBoard, down, empty_board, main_board, worker
from tests.tui.sample_scenes import wait_for


async def select_row(run: Run, table_type: type[KeyedTable[object]], key: str) -> None:
    """Focus the table of `table_type` and move its cursor to the row `key` by arrow keys."""
    table = run.app.query_one(table_type)
    table.focus()
    await run.press()
    for _ in range(table.row_count + 1):
        if table.row_count and table.coordinate_to_cell_key(
            table.cursor_coordinate
        ).row_key.value == key:
            return
        await run.press("down")
    raise AssertionError(f"row {key} not reachable in {table_type.__name__}")


async def select_worker(run: Run, worker_id: str) -> None:
    """Move the workers table cursor to `worker_id` with the arrow keys."""
    await select_row(run, WorkersTable, worker_id)  # type: ignore[arg-type]


async def answer(run: Run, key: str) -> str:
    """Answer the confirmation on screen with `key`; returns its question."""
    await wait_for(run.pilot, lambda: isinstance(run.app.screen, ConfirmScreen), "a question")
    screen = run.app.screen
    assert isinstance(screen, ConfirmScreen)
    await run.press(key)
    return screen.question


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
        await run.press("e")
        assert run.board.sent("enqueue_sample") == ["email"]


async def test_unexpected_error_is_an_error_notification_not_a_crash() -> None:
    board = FixedBoard(main_board(), fail={"add_worker": RuntimeError("pool exhausted")})
    async with running(board) as run:
        await run.press("a")
        assert run.said("error") == ["RuntimeError: pool exhausted"]
        assert run.app.is_running
        assert run.app.return_code is None


async def test_crash_is_refused_for_a_worker_this_dashboard_did_not_start() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "batch-07")
        await run.press("x")
        assert not isinstance(run.app.screen, ConfirmScreen)
        assert run.board.sent("crash") == []
        assert "not in this dashboard" in run.said("warning")[0]


async def test_a_stopped_worker_started_here_stays_here_and_its_keys_say_why_not(
) -> None:
    # Defect 6: a crashed worker of this dashboard was labelled "remote", and x said it
    # "runs on opsbox, not in this process". It stays "here"; its keys are greyed with the
    # reason (issue 26: they used to toast "Pausing ..." and do nothing), nothing is sent.
    board = FixedBoard(main_board())
    async with running(board) as run:
        table = run.app.query_one(WorkersTable)
        assert str(table.get_cell("opsbox-3", "where")) == "here"
        await select_worker(run, "opsbox-3")
        await run.press("p", "d", "x")
        assert not isinstance(run.app.screen, ConfirmScreen)
        said = run.said("warning")
        assert len(said) == 3 and all("opsbox-3 has stopped" in m for m in said), said
        assert run.board.commands == []


async def test_crash_asks_first_naming_the_worker_and_n_leaves_it_running() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-1")
        await run.press("x")
        question = await answer(run, "n")
        assert "opsbox-1" in question and "4 jobs" in question
        assert run.board.sent("crash") == []
        await run.press("x")
        await answer(run, "y")
        await run.press()
        assert run.board.sent("crash") == ["opsbox-1"]


async def test_r_acts_on_the_focused_dead_jobs_table_only() -> None:
    # Defect 8: r retried dead job #3 while a worker row was selected, without asking.
    async with running(FixedBoard(main_board())) as run:
        await select_worker(run, "opsbox-1")
        await run.press("r")
        assert not isinstance(run.app.screen, ConfirmScreen)
        assert run.board.sent("retry") == []
        assert "No dead job selected" in run.said("warning")[0]


async def test_r_on_a_dead_billing_job_asks_n_leaves_it_dead_y_retries_it() -> None:
    async with running(FixedBoard(main_board())) as run:
        await select_row(run, DeadJobsTable, "17")  # type: ignore[arg-type]
        await run.press("r")
        question = await answer(run, "n")
        assert "#17" in question and "billing" in question and "charge" in question
        assert run.board.sent("retry") == []
        await run.press("r")
        await answer(run, "y")
        await run.press()
        assert run.board.sent("retry") == [17]
        await select_row(run, DeadJobsTable, "9")  # type: ignore[arg-type]
        await run.press("r")
        assert "charge" not in await answer(run, "escape")
        assert run.board.sent("retry") == [17]


async def test_cancel_asks_naming_the_claimed_job_then_cancels_it() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("C")  # the workers table has the focus: nothing to cancel
        assert run.board.sent("cancel_job") == [] and "No running job" in run.said("warning")[0]
        await select_row(run, ClaimsTable, "1045")  # type: ignore[arg-type]
        await run.press("C")
        question = await answer(run, "y")
        assert "#1045" in question and "opsbox-2" in question
        await run.press()
        assert run.board.sent("cancel_job") == [1045]
        assert "Cancelled job #1045" in run.said("information")


async def test_enter_on_a_job_row_opens_its_detail_and_main_keys_rest_there() -> None:
    async with running(FixedBoard(main_board())) as run:
        for table, key in ((DeadJobsTable, "17"), (ClaimsTable, "1048"), (FailuresLog, None)):
            if key is None:
                run.app.query_one(table).focus()
                await run.press()
            else:
                await select_row(run, table, key)  # type: ignore[arg-type]
            await run.press("enter")
            screen = run.app.screen
            assert isinstance(screen, JobDetailScreen)
            expected = int(key) if key else run.app.query_one(FailuresLog).lines[-1].job_id
            assert screen.job_id == expected
            await run.press("e")  # not an enqueue on the detail screen
            assert run.board.sent("enqueue_sample") == []
            await run.press("escape")
            await wait_for(run.pilot, lambda: len(run.app.screen_stack) == 1, "back")


async def test_g_asks_for_a_job_id_and_opens_it() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("g")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen), "prompt")
        await run.press(*"x1", "enter")
        assert isinstance(run.app.screen, PromptScreen), "not a job id: the prompt stays"
        await run.press("backspace", "backspace", *"#42", "enter")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, JobDetailScreen), "detail")
        screen = run.app.screen
        assert isinstance(screen, JobDetailScreen) and screen.job_id == 42


async def test_jobs_and_lease_advice_open_their_screens() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("j")
        assert isinstance(run.app.screen, JobsScreen)
        await run.press("escape")
        await wait_for(run.pilot, lambda: len(run.app.screen_stack) == 1, "back")
        await run.press("L")
        assert isinstance(run.app.screen, AdviceScreen)


async def test_p_shift_pauses_a_running_queue_and_resumes_a_paused_one() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("P")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen), "prompt")
        prompt = run.app.screen
        assert isinstance(prompt, PromptScreen) and "reports" in prompt.question
        await run.press("enter")  # the paused queue is offered first: it resumes
        await run.press("P")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen), "prompt")
        await run.press(*["backspace"] * 7, *"emails", "enter")
        # Then the reason, as the CLI's --reason (issue 26: the dashboard asked none).
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen)
                       and "Why pause queue emails?" in run.app.screen.question, "reason")
        await run.press(*"SMTP outage", "enter")
        assert run.board.commands == [
            ("resume_queue", "reports"), ("pause_queue", ("emails", "SMTP outage"))
        ]
        assert "Queue emails paused: no claims from it until resumed" in run.said("information")


async def test_h_shows_collapsed_remote_stopped_workers_and_hides_them_again() -> None:
    # Issue 26: earlier runs' workers piled up at the top; remote stopped and gone workers
    # start collapsed (this dashboard's own stopped ones stay: they are the story).
    base = main_board()
    stale = replace(base.workers[2], id="old-run-1", state="gone")
    async with running(FixedBoard(replace(base, workers=(stale, *base.workers)))) as run:
        table = run.app.query_one(WorkersTable)
        assert table.row_count == 4
        assert "1 stopped remote hidden" in str(table.border_title)
        await run.press("h")
        assert table.row_count == 5 and "hidden" not in str(table.border_title)
        await run.press("h")
        assert table.row_count == 4


async def test_keys_that_need_the_database_are_greyed_out_while_it_is_down() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        board.snapshot = down(main_board())
        run.app.request_refresh()
        await run.press()
        assert run.app.screen.active_bindings["e"].enabled is False
        await run.press("e")
        await select_row(run, DeadJobsTable, "17")  # type: ignore[arg-type]
        await run.press("r")
        assert run.board.commands == []
        assert len(run.said("warning")) == 2
        assert all("does not answer" in message for message in run.said("warning"))


async def test_demo_keys_are_hidden_outside_demo_mode() -> None:
    async with running(FixedBoard(main_board())) as run:
        assert "n" not in run.app.screen.active_bindings
        assert "R" not in run.app.screen.active_bindings
        await run.press("n", "R")
        assert run.board.commands == []


async def test_demo_restart_asks_then_resets_the_database_and_the_story() -> None:
    board = DemoBoard()
    async with running(board, demo=DemoScript()) as run:
        script = run.app.demo
        assert isinstance(script, DemoScript)
        board.at(START)
        run.app.request_refresh()
        await run.press("n")
        board.at(CLAIMED)
        assert script.index == 1
        await run.press("R")
        assert "emptied" in await answer(run, "n")
        assert board.resets == 0 and script.index == 1
        await run.press("R")
        await answer(run, "y")
        await run.press()
        assert board.resets == 1
        assert script.index == 0
        assert run.app.query_one(FailuresLog).row_count == len(board.snapshot.failures)


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


async def test_help_lists_every_key_of_the_action_record_and_closes_on_escape() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("question_mark")
        help_screen = run.app.screen
        assert isinstance(help_screen, HelpScreen)
        titles = [title for _, title, _ in help_screen.keys]
        assert titles == [a.title for a in ACTIONS if not a.demo_only]
        await run.press("escape")
        assert not isinstance(run.app.screen, HelpScreen)


async def test_bindings_palette_and_help_come_from_one_record() -> None:
    async with running(FixedBoard(main_board())) as run:
        bound = {b.action for b in run.app.BINDINGS if not isinstance(b, tuple)}  # type: ignore[union-attr]
        palette = {action for _, _, action in run.app.palette_entries()}
        assert bound == {a.action for a in ACTIONS}
        assert palette == {a.action for a in ACTIONS if not a.demo_only and a.name != "quit"}


async def test_selection_survives_refreshes_that_change_rows() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        await select_worker(run, "batch-07")
        snapshot = main_board()
        board.snapshot = replace(
            snapshot, workers=(*snapshot.workers[1:], worker("opsbox-4", heartbeat_age=0))
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


def test_the_fixed_board_answers_every_call_of_the_control_protocol() -> None:
    # The tests drive the app through FixedBoard; a protocol method it lacks would only
    # fail the first test that happens to reach it.
    wanted = {name for name in vars(BoardControl) if not name.startswith("_")}
    assert wanted and wanted <= set(dir(FixedBoard)), wanted - set(dir(FixedBoard))
