"""Retry or cancel every job a jobs list shows (issue 26: after an outage the dead jobs are
hundreds). The count comes from the database, not from the rows on screen (a list shows at
most 200); the confirmation states it, and the command re-checks each row as it writes.
"""

from __future__ import annotations

from typing import Protocol

from taskboard.core.view.control import BoardControl
from taskboard.tui.screens.confirm import ConfirmScreen
from taskboard.tui.screens.reading import answer
from textual.screen import Screen

RETRYABLE = ("dead", "cancelled")
CANCELLABLE = ("pending", "scheduled", "running")


class JobsList(Protocol):
    """What the flow needs of the jobs screen."""

    control: BoardControl
    state: str
    needle: str | None

    def action_reload(self) -> None: ...


def bulk_action(state: str) -> str | None:
    """"retry" for dead and cancelled lists, "cancel" for unfinished ones, else None."""
    if state in RETRYABLE:
        return "retry"
    if state in CANCELLABLE:
        return "cancel"
    return None


def unavailable(state: str) -> str | None:
    """Why a list in `state` has nothing to act on all at once, or None."""
    if bulk_action(state) is None:
        return "completed jobs cannot be retried or cancelled"
    return None


async def act_on_all(screen: Screen[None], jobs: JobsList) -> None:
    """Count what the list's state and filter name, ask with the count, then act."""
    state, needle = jobs.state, jobs.needle
    action = bulk_action(state)
    if action is None:
        screen.notify(f"Nothing to do: {unavailable(state)}.", severity="warning")
        return
    matching = f" matching {needle!r}" if needle else ""
    preview, refusal = await answer(lambda: jobs.control.preview_all(action, state, needle))
    if preview is None:
        screen.notify(f"Counting {state} jobs{matching}: {refusal}", severity="error")
        return
    if preview.count == 0:
        screen.notify(f"No {state} job{matching} to {action}.")
        return
    ids = ", ".join(f"#{i}" for i in preview.first_ids[:5])
    more = ", …" if preview.count > 5 else ""
    plural = "s" if preview.count != 1 else ""
    again = (
        " Each runs again (a billing job may charge again)." if action == "retry"
        else " Workers running any of them stop within a second."
    )
    question = (
        f"{action.capitalize()} {preview.count} {state} job{plural}{matching} "
        f"({ids}{more})?{again} Jobs that changed meanwhile are left as they are."
    )
    yes = await screen.app.push_screen_wait(
        ConfirmScreen(question, yes=f"{action.capitalize()} {preview.count}")
    )
    if not yes:
        return
    done, refusal = await answer(lambda: jobs.control.act_on_all(action, state, needle))
    if done is None:
        screen.notify(f"{action.capitalize()} {state} jobs: {refusal}", severity="error")
        jobs.action_reload()
        return
    verb = "Retried" if action == "retry" else "Cancelled"
    left = f"; {len(done.refused)} left as they were" if done.refused else ""
    screen.notify(f"{verb} {done.done} {state} job{'s' if done.done != 1 else ''}{left}")
    jobs.action_reload()
