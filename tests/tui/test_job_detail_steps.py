"""The job detail screen shows what a waiting job waits on, its steps (a checkpoint the fence
refused says so) and its result; a job without any shows nothing more."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from taskboard.core.view.board import JobAction
from taskboard.core.view.step_rows import StepRecord

from tests.tui.fakes_screens import LARGE, ScreensControl, hosting, shown_text
from tests.tui.test_job_detail import open_detail

AT = datetime(2026, 3, 14, 9, 17, 5, tzinfo=UTC)


async def test_steps_parents_and_result_are_shown() -> None:
    control = ScreensControl()
    base = control.details[23]
    control.details[77] = dataclasses.replace(
        base, id=77, state="completed",
        after=("#12 billing completed",),
        steps=(StepRecord("send", "rejected", 1, "opsbox-1", AT, "m-1"),
               StepRecord("send", "recorded", 2, "opsbox-2", AT, "m-1")),
        result={"message_id": "<m-1>"},
    )
    async with hosting(size=LARGE) as run:
        screen = await open_detail(run, control, 77)
        text = " ".join(shown_text(screen.query_one("#effects")).split())
    assert "after: #12 billing completed" in text
    assert "step send claim #1 opsbox-1" in text
    assert "rejected: effect happened, record fenced out" in text
    assert "step send claim #2 opsbox-2" in text and 'recorded "m-1"' in text
    assert 'result: {"message_id": "<m-1>"}' in text


async def test_a_job_without_steps_shows_no_such_section() -> None:
    async with hosting(size=LARGE) as run:
        screen = await open_detail(run, ScreensControl(), 23)
        assert "Steps, parents, result" not in shown_text(screen.query_one("#effects"))


async def test_a_step_that_ran_again_after_its_record_was_fenced_out_is_named() -> None:
    control = ScreensControl()
    control.details[78] = dataclasses.replace(
        control.details[23], id=78, state="completed",
        steps=(StepRecord("render", "recorded", 1, "opsbox-1", AT, "<p>hi</p>"),
               StepRecord("send", "rejected", 1, "opsbox-1", AT, "m-1"),
               StepRecord("send", "recorded", 2, "opsbox-2", AT, "m-2")),
    )
    async with hosting(size=LARGE) as run:
        screen = await open_detail(run, control, 78)
        text = " ".join(shown_text(screen.query_one("#effects")).split())
    assert "ran again after its record was fenced out: send" in text
    assert "render" not in text.split("ran again")[1]  # replayed, not repeated


async def test_a_waiting_job_says_what_it_waits_on_and_operator_actions_are_listed() -> None:
    control = ScreensControl()
    control.details[79] = dataclasses.replace(
        control.details[23], id=79, state="waiting",
        after=("#12 billing running", "#13 email pending"),
        actions=(JobAction("retried", AT, "by filter: state dead, needle 'billing'"),),
    )
    async with hosting(size=LARGE) as run:
        screen = await open_detail(run, control, 79)
        summary = " ".join(shown_text(screen.query_one("#summary")).split())
        effects = " ".join(shown_text(screen.query_one("#effects")).split())
    assert "waits on #12 billing running, #13 email pending" in summary
    assert "Operator actions · 1" in effects
    assert "retried by filter: state dead, needle 'billing'" in effects
