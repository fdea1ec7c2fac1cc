"""What each panel shows at 80x24, 160x45 and 220x60 (issue 13, defects 3, 9, 10, 11, 12, 14
and 15): nothing cut that matters, spare room where it helps."""

from __future__ import annotations

from dataclasses import replace

from taskboard.core.training.scenario import DemoScript
from taskboard.tui.widgets.claims import ClaimsTable
from taskboard.tui.widgets.dead_jobs import DeadJobsTable
from taskboard.tui.widgets.effects import EffectsPanel
from taskboard.tui.widgets.failures import FailuresLog
from taskboard.tui.widgets.footer import TaskboardFooter
from taskboard.tui.widgets.narration import Narration
from taskboard.tui.widgets.pool import PoolHeadroom
from taskboard.tui.widgets.status_line import StatusLine
from taskboard.tui.widgets.workers import WorkersTable
from textual.widget import Widget

from tests.tui.demo_board import DEMO_MOMENTS, DONE, DemoBoard
from tests.tui.helpers import Run, running
from tests.tui.sample_board import (
    DEAD_ERROR,
    EMAIL_SCOPE,
    FixedBoard,
    claim,
    main_board,
)
from tests.tui.sample_scenes import HUGE, LARGE, SMALL


def visible_keys(run: Run) -> str:
    """The footer's keys as drawn, left to right, only those inside the screen."""
    footer = run.app.query_one(TaskboardFooter)
    width = run.app.size.width
    shown = []
    for key in footer.query("FooterKey"):
        region = key.region
        if key.display and region.width and region.right <= width:
            shown.append(str(getattr(key, "description", "")))
    return " ".join(shown)


def fully_visible(widget: Widget, run: Run) -> bool:
    """The widget's whole box is inside the screen."""
    return run.app.screen.region.contains_region(widget.region)


async def test_at_80x24_footer_header_and_workers_table_fit() -> None:
    # Defect 9: the footer was cut ("? He"), the database URL was cut, the workers table
    # scrolled sideways.
    async with running(FixedBoard(main_board()), size=SMALL) as run:
        keys = visible_keys(run)
        assert "Help" in keys and "Quit" in keys and "Pause worker" in keys
        header = str(run.app.query_one(StatusLine).render())
        assert header.rstrip().endswith("db.internal:5432/taskboard")
        table = run.app.query_one(WorkersTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert not table.show_horizontal_scrollbar


async def test_demo_at_80x24_footer_and_narration_fit_at_every_step() -> None:
    # Defect 9: at 80x24 the demo footer was cut ("? He") and the narration lost its last
    # line (the status that says what n does next).
    board = DemoBoard()
    async with running(board, size=SMALL, demo=DemoScript()) as run:
        script = run.app.demo
        assert isinstance(script, DemoScript)
        narration = run.app.query_one(Narration)
        claims = run.app.query_one(ClaimsTable)
        for step, moment in enumerate((*DEMO_MOMENTS, DONE)):
            board.at(moment)
            run.app.request_refresh()
            await run.press()
            keys = visible_keys(run)
            assert "Next step" in keys and "Help" in keys and "Quit" in keys, (step, keys)
            status = script.progress().status
            assert fully_visible(narration, run), step
            needs = narration.get_content_height(narration.size, run.app.size,
                                                 narration.size.width)
            assert narration.size.height == needs, step  # every line, the status last
            assert str(narration.render()).splitlines()[-1] == (status or (
                "End of the story; the board stays live. R tells it again." if script.finished
                else "n: next step"
            )), step
            # The narration says "watch the Token column and the countdown": both are there.
            assert {"token", "lease", "note"} <= set(claims.widths)
            assert not claims.show_horizontal_scrollbar
            if step < len(DEMO_MOMENTS):
                await run.press("n")
                assert script.index == step + 1, script.progress().status


async def test_the_effects_panel_is_reachable_at_80x24_by_tab() -> None:
    async with running(FixedBoard(main_board()), size=SMALL) as run:
        effects = run.app.query_one(EffectsPanel)
        assert not fully_visible(effects, run)
        for _ in range(6):
            if run.app.focused is effects:
                break
            await run.press("tab")
        await run.pilot.pause(0.3)  # the scroll into view is animated
        assert run.app.focused is effects and fully_visible(effects, run)


async def test_large_terminals_give_spare_height_to_failures_and_dead_jobs() -> None:
    # Defect 12: 20-30 empty effects rows while the failures log was fixed at 6 lines.
    for size in (LARGE, HUGE):
        async with running(FixedBoard(main_board()), size=size) as run:
            effects = run.app.query_one(EffectsPanel)
            # As high as its text, wrapped to its width, needs: no empty rows.
            needs = effects.get_content_height(effects.size, run.app.size, effects.size.width)
            assert effects.size.height == needs, size
            failures = run.app.query_one(FailuresLog)
            dead = run.app.query_one(DeadJobsTable)
            assert failures.outer_size.height >= 12, size
            assert dead.outer_size.height >= 8, size


async def test_dead_job_errors_get_the_width_of_the_panel() -> None:
    # Defect 10: errors were cut at about 20 characters at every width.
    async with running(FixedBoard(main_board()), size=LARGE) as run:
        error = str(run.app.query_one(DeadJobsTable).get_cell("17", "error"))
        assert len(error) >= 60 and DEAD_ERROR.startswith(error.rstrip("…"))


async def test_effects_say_whose_emails_and_charges_they_count() -> None:
    # Defect 11: the panel counted only this process's sink and endpoint without saying so.
    async with running(FixedBoard(main_board()), size=LARGE) as run:
        text = " ".join(str(run.app.query_one(EffectsPanel).render()).split())
        assert EMAIL_SCOPE in text
        assert "this process's Stripe endpoint" in text


async def test_pool_panel_says_what_it_counts_for_every_running_worker() -> None:
    # Defect 14: "idle" never moved, the numbers were unexplained, "2 reserved each: renew
    # + control" was no longer true, and remote workers had no headroom shown.
    async with running(FixedBoard(main_board()), size=LARGE) as run:
        pool = run.app.query_one(PoolHeadroom)
        text = str(pool.render())
        assert "idle" not in text
        assert "batch-07 remote 5/10 used · 5 free" in text
        assert "opsbox-2 here 10/10 used · 0 free: FULL" in text
        assert "1 waiting for a connection" in text
        assert "opsbox-3" not in text  # stopped: no pool
        assert pool.border_subtitle == "used incl. 2-3 for engine + control"


async def test_claims_show_expired_and_reclaimed_from_on_the_row() -> None:
    # Defect 3: nothing on a reclaimed row said it was taken from A.
    async with running(FixedBoard(main_board()), size=LARGE) as run:
        table = run.app.query_one(ClaimsTable)
        assert "EXPIRED" in str(table.get_cell("1046", "lease"))
        assert str(table.get_cell("1048", "note")) == "← reclaimed from opsbox-3"
        row = claim(1050, "email", "opsbox-1", seconds_left=-0.05, token_no=7)
        run.board.snapshot = replace(main_board(), claims=(row,), claims_total=1)
        run.app.request_refresh()
        await run.press()
        assert "EXPIRED" in str(table.get_cell("1050", "lease"))


async def test_claims_panel_never_says_more_while_it_has_room() -> None:
    # Defect 15: "3 more not shown" while half of the panel was empty.
    many = tuple(
        claim(2000 + n, "sleep", "opsbox-1", seconds_left=10.0 + n, token_no=n) for n in range(40)
    )
    board = FixedBoard(replace(main_board(), claims=many, claims_total=40))
    async with running(board, size=LARGE) as run:
        table = run.app.query_one(ClaimsTable)
        fits = table.size.height - 1
        assert table.row_count == fits
        assert table.border_subtitle == f"{40 - fits} more, later deadlines"
        board.snapshot = replace(main_board(), claims=many[:6], claims_total=9)
        run.app.request_refresh()
        await run.press()
        assert table.row_count == 6
        assert table.border_subtitle == "the 6 nearest deadlines of 9"
        assert "not shown" not in str(table.border_subtitle)
