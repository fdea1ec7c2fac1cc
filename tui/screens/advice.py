"""Lease advice: per kind, how long handlers run against the lease their workers hold.

Every attempt records its handler's run and the least lease time left at a renewal, so the
advice covers the whole fleet, not only this dashboard's workers. The verdicts are core's
(`BoardControl.lease_advice`); this screen shows them with the rule that decides them.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from taskboard.core.board import KindAdvice
from taskboard.core.control import BoardControl
from taskboard.tui.format import Colours
from taskboard.tui.screens.reading import ReadingLine, answer
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

RULE = (
    "too short: p99 over half the lease, or a renewal found less than a fifth of it left — "
    "a stall or a slow network away from losing healthy jobs. too long: the lease over "
    "20 times p99 (and over 30 s) — a crashed worker's jobs wait that long to run again. "
    "Suggested lease: 3 times p99, at least 10 s."
)
"""The rule core's `advise` applies (taskboard.core.inspection), in words."""

EMPTY = (
    "no recorded attempts yet: advice appears once workers have run jobs (each attempt "
    "records its handler's run and its least margin at a renewal)"
)
"""Shown instead of the table before any attempt has finished."""


def duration(value: float | None) -> str:
    """Seconds with as many decimals as a short duration needs; "—" for none."""
    if value is None:
        return "—"
    if value < 0.01:
        return f"{value:.3f} s"
    if value < 10:
        return f"{value:.2f} s"
    return f"{value:.1f} s"


def verdict_style(verdict: str, colours: Colours) -> str:
    """ok green, too short red (jobs get lost), too long yellow (slow recovery)."""
    return {
        "ok": colours.good,
        "too short": f"bold {colours.bad}",
        "too long": f"bold {colours.warn}",
    }.get(verdict, "")


WIDE = 120
"""From this width the reason sits in the table's last column; narrower, under it."""


def advice_table(advice: list[KindAdvice], colours: Colours, *, wide: bool) -> RenderableType:
    """One row per kind; numbers right-aligned, the verdict coloured, the reason wrapped
    in the last column (wide) or listed under the table (narrow, where ten columns with a
    sentence in one of them do not fit)."""
    table = Table(expand=wide, box=None, header_style="bold", pad_edge=False, padding=(0, 1))
    table.add_column("Kind", no_wrap=True)
    table.add_column("Samples", justify="right", no_wrap=True)
    table.add_column("p50", justify="right", no_wrap=True)
    table.add_column("p99", justify="right", no_wrap=True)
    table.add_column("Longest" if wide else "Max", justify="right", no_wrap=True)
    table.add_column("Least margin" if wide else "Margin", justify="right", no_wrap=True)
    table.add_column("Lease", justify="right", no_wrap=True)
    table.add_column("Verdict", no_wrap=True)
    table.add_column("Suggested" if wide else "Suggest", justify="right", no_wrap=True)
    if wide:
        table.add_column("Why", ratio=1, min_width=12)
    reasons = Table.grid(padding=(0, 1))
    reasons.add_column(no_wrap=True)
    reasons.add_column()
    for row in advice:
        verdict = Text(row.verdict, verdict_style(row.verdict, colours))
        cells: list[RenderableType] = [
            Text(row.kind, "bold"),
            str(row.samples),
            duration(row.p50),
            duration(row.p99),
            duration(row.longest),
            duration(row.least_margin),
            f"{row.lease:g} s",
            verdict,
            f"{row.suggested_lease:g} s" if row.suggested_lease is not None else "—",
        ]
        if wide:
            cells.append(Text(row.reason, colours.muted))
        table.add_row(*cells)
        reasons.add_row(Text(f"{row.kind}:", "bold"), Text(row.reason, colours.muted))
    return table if wide else Group(table, Text(""), reasons)


class AdviceScreen(Screen[None]):
    """Lease advice per kind, read through `control.lease_advice`.

    Keys: escape/q back, R/F5 read again.
    """

    DEFAULT_CSS = """
    AdviceScreen #advice-body {
        height: 1fr;
        padding: 0 1;
    }
    AdviceScreen #advice-table {
        height: auto;
        margin-top: 1;
    }
    AdviceScreen #advice-rule {
        height: auto;
        margin-top: 1;
        color: $foreground-muted;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "back", "Back", id="advice-back"),
        Binding("R,f5", "reload", "Reload", id="advice-reload"),
    ]

    def __init__(self, control: BoardControl) -> None:
        super().__init__()
        self.control = control
        self.advice: list[KindAdvice] | None = None
        """The latest answer, or None before the first."""
        self.refusal: str | None = None
        """Why the last read failed, one line; None after a success."""
        self._reading = False
        self._colours = Colours()

    def compose(self) -> ComposeResult:
        """The reading line, the table (or why there is none), the rule, the footer."""
        yield ReadingLine(id="reading")
        with VerticalScroll(id="advice-body"):
            yield Static(id="advice-table")
            yield Static(RULE, id="advice-rule", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Resolve colours and read the advice."""
        self._colours = Colours.from_theme(self.app.get_css_variables())
        self.title = "Lease advice"
        self.action_reload()

    @property
    def reading(self) -> bool:
        """True while a read is in flight."""
        return self._reading

    def action_reload(self) -> None:
        """Read the advice again (one read at a time)."""
        if self._reading:
            self.notify("Still waiting for the database (reading lease advice).")
            return
        self._reading = True
        self.query_one(ReadingLine).waiting("Reading lease advice")
        self.run_worker(self._read(), group="read", exit_on_error=False)

    async def _read(self) -> None:
        try:
            advice, refusal = await answer(self.control.lease_advice)
        finally:
            self._reading = False
        self.refusal = refusal
        line = self.query_one(ReadingLine)
        if advice is None:
            line.refused("Lease advice", refusal or "no answer")
            return
        self.advice = advice
        self._show(advice)

    def _show(self, advice: list[KindAdvice]) -> None:
        colours = self._colours
        table = self.query_one("#advice-table", Static)
        line = self.query_one(ReadingLine)
        if not advice:
            line.status(Text.assemble(("Lease advice", "bold"), " · no kinds yet"))
            table.update(Text(EMPTY, colours.muted))
            return
        flagged = [a for a in advice if a.verdict != "ok"]
        heading = Text.assemble(
            ("Lease advice", "bold"),
            f" · {len(advice)} kind{'' if len(advice) == 1 else 's'}, from every worker's "
            "recorded attempts · ",
        )
        if flagged:
            heading.append(f"{len(flagged)} to change", f"bold {colours.warn}")
        else:
            heading.append("every lease fits", colours.good)
        line.status(heading)
        table.update(advice_table(advice, colours, wide=self.size.width >= WIDE))

    def on_resize(self) -> None:
        """Wide or narrow table for the new width."""
        if self.advice:
            self._show(self.advice)

    def action_back(self) -> None:
        """Back to the screen underneath."""
        self.dismiss()
