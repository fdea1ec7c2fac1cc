"""What the job, jobs and advice screens share: one line saying what they wait for from the
database (or why it refused), and the few formats their tables use.

Every control call may take seconds when the database does not answer, so the screens run
them in workers and say so here instead of freezing; a refusal is one line, never a trace.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from rich.text import Text
from taskboard.core.view.control import CommandRefused
from taskboard.tui.format import Colours
from textual.widgets import Static

T = TypeVar("T")

WAITING = "waiting for the database…"
"""What a screen says while a control call has not answered."""


def refusal(err: BaseException) -> str:
    """One line for a failed control call: the refusal's own words, or the error's type."""
    if isinstance(err, CommandRefused):
        text = str(err)
    else:
        text = f"{type(err).__name__}: {err}"
    return " ".join(text.split()) or type(err).__name__


async def answer(call: Callable[[], Awaitable[T]]) -> tuple[T | None, str | None]:
    """(result, None) if the call answered, else (None, the one-line refusal)."""
    try:
        return await call(), None
    except Exception as err:
        return None, refusal(err)


class ReadingLine(Static):
    """"<what> — waiting for the database…", or the refusal, or a plain status, in one line."""

    DEFAULT_CSS = """
    ReadingLine {
        height: auto;
        padding: 0 1;
        background: $panel;
    }
    ReadingLine.-refused {
        background: $error 40%;
    }
    """

    def waiting(self, what: str) -> None:
        """A call is in flight."""
        self.remove_class("-refused")
        self.update(Text.assemble((what, "bold"), " — ", WAITING))

    def refused(self, what: str, reason: str) -> None:
        """The last call failed: say why, in the call's own words."""
        self.add_class("-refused")
        self.update(Text.assemble((f"{what}: ", "bold"), reason))

    def status(self, text: str | Text) -> None:
        """Nothing in flight; `text` says what is on screen."""
        self.remove_class("-refused")
        self.update(text)


def stamp(moment: datetime | None, *, date: bool = False, millis: bool = False) -> str:
    """A database timestamp as shown in the tables: time of day (with milliseconds when
    the order of events matters), the date in front when asked; "—" for none."""
    if moment is None:
        return "—"
    text = moment.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    if millis:
        text += f".{moment.microsecond // 1000:03d}"
    return text


def seconds(value: float | None) -> str:
    """A duration: "0.123 s" under ten seconds, "12.3 s" above; "—" for none."""
    if value is None:
        return "—"
    return f"{value:.3f} s" if abs(value) < 10 else f"{value:.1f} s"


def outcome_style(outcome: str | None, colours: Colours) -> str:
    """An attempt's outcome: completed green, lost or failed yellow, fenced or dead red."""
    if outcome is None:
        return f"bold {colours.info}"
    if outcome == "completed":
        return colours.good
    if outcome in ("completion_rejected", "dead"):
        return f"bold {colours.bad}"
    if outcome in ("cancelled", "released", "snoozed"):
        return colours.muted
    return colours.warn


def state_style(state: str, colours: Colours) -> str:
    """A job's state word: running blue, completed green, dead red, cancelled grey,
    scheduled and waiting (on its parents) amber."""
    return {
        "running": f"bold {colours.info}",
        "completed": colours.good,
        "dead": f"bold {colours.bad}",
        "cancelled": colours.muted,
        "scheduled": colours.warn,
        "waiting": colours.warn,
    }.get(state, "")
