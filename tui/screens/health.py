"""Queue health: can PostgreSQL clean up after the queue?

The reading and its grade are core's (`BoardControl.queue_health`, the same as `taskboard
health`); this screen shows them with the grade's colour, what to do first, and reads
again every few seconds, so the claim time is the mean of the claims since the last read.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import ClassVar

from rich.text import Text
from taskboard.core.view.control import BoardControl
from taskboard.core.view.health import HealthReport
from taskboard.core.view.health_text import report_lines
from taskboard.tui.format import Colours
from taskboard.tui.screens.read_screen import ReadScreen
from taskboard.tui.screens.reading import ReadingLine
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

EVERY_SECONDS = 5.0
"""How often the screen reads the health again while it is open."""


def level_style(level: str, colours: Colours) -> str:
    """ok green, amber the theme's warning, red its error."""
    return {
        "ok": colours.good,
        "amber": f"bold {colours.warn}",
        "red": f"bold {colours.bad}",
    }.get(level, "")


class HealthScreen(ReadScreen[HealthReport]):
    """The queue's health, read through `control.queue_health`.

    Keys: escape/q back, R/F5 read again.
    """

    DEFAULT_CSS = """
    HealthScreen #health-body {
        height: 1fr;
        padding: 0 1;
    }
    HealthScreen #health-advice {
        height: auto;
        margin-top: 1;
    }
    HealthScreen #health-readings {
        height: auto;
        margin-top: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "back", "Back", id="health-back"),
        Binding("R,f5", "reload", "Reload", id="health-reload"),
    ]

    def __init__(self, control: BoardControl, every: float | None = EVERY_SECONDS) -> None:
        super().__init__(control)
        self.every = every
        """Seconds between reads while open; None reads only on R."""
        self.report: HealthReport | None = None
        """The latest reading, or None before the first."""

    def compose(self) -> ComposeResult:
        """The reading line, the advice, the readings, the footer."""
        yield ReadingLine(id="reading")
        with VerticalScroll(id="health-body"):
            yield Static(id="health-advice")
            yield Static(id="health-readings", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Resolve colours, read the health, and read it again every few seconds."""
        self._colours = Colours.from_theme(self.app.get_css_variables())
        self.title = "Queue health"
        self.action_reload()
        if self.every is not None:
            self.set_interval(self.every, self._again)

    @property
    def what(self) -> str:
        """What this screen reads."""
        return "queue health"

    def read_call(self) -> Awaitable[HealthReport]:
        """`control.queue_health`."""
        return self.control.queue_health()

    def _again(self) -> None:
        if not self._reading:
            self.action_reload()

    async def show_answer(self, value: HealthReport) -> None:
        """Keep the reading and show it."""
        self.report = value
        self._show(value)

    def _show(self, r: HealthReport) -> None:
        colours = self._colours
        style = level_style(r.level, colours)
        self.query_one(ReadingLine).status(
            Text.assemble(("Queue health", "bold"), " · ", (r.level.upper(), style))
        )
        advice = Text.assemble((f"{r.level.upper()}: ", style), r.advice)
        for level, finding in r.findings:
            advice.append("\n  ")
            advice.append(f"{level:<5}", level_style(level, colours))
            advice.append(f"  {finding}")
        self.query_one("#health-advice", Static).update(advice)
        # The readings as `taskboard health` prints them, past its first line (the advice).
        readings = report_lines(r)[1 + len(r.findings):]
        self.query_one("#health-readings", Static).update(Text("\n".join(readings)))
