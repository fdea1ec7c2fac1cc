"""Lease advice: per kind, the policies it runs under beside what `taskboard advise` says.

A kind sets its own lease, timeout and attempts (`JobKind` fields; the workers' flags are
the defaults for a kind that sets none) and its fleet-wide limits (`max_running`,
`rate_per_second`, kept in `taskboard_kind_limits`). Every attempt records the least lease
time left at a renewal, so the verdicts cover the whole fleet, not only this dashboard's
workers. The verdicts are core's, the same `taskboard advise` prints
(`BoardControl.lease_advice`); this screen shows them with the rule that decides them and
the flag or line of code that sets each lease.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from taskboard.core.view.control import BoardControl
from taskboard.core.view.lease_judgement import RULE, KindPolicies
from taskboard.tui.format import Colours
from taskboard.tui.screens.read_screen import ReadScreen
from taskboard.tui.screens.reading import ReadingLine
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

__all__ = ["EMPTY", "RULE", "WIDE", "AdviceScreen", "advice_tables", "duration",
           "verdict_style"]

EMPTY = (
    "no kinds yet: this dashboard runs none, and no worker has recorded an attempt or "
    "declared a limit"
)
"""Shown instead of the tables when there is no kind to show."""

NOT_YET = "no timings yet: its lease is a guess until it has run"
"""The reason of a kind that has no recorded attempts."""


def duration(value: float | None) -> str:
    """Seconds with as many decimals as a short duration needs; "—" for none."""
    if value is None:
        return "—"
    if value == 0:
        return "0 s"
    if value < 0.01:
        return f"{value:.3f} s"
    if value < 10:
        return f"{value:.2f} s"
    return f"{value:.1f} s"


def verdict_style(verdict: str, colours: Colours) -> str:
    """ok green; too short and conflict red (jobs get lost); too long yellow (slow
    recovery)."""
    return {
        "ok": colours.good,
        "too short": f"bold {colours.bad}",
        "conflict": f"bold {colours.bad}",
        "too long": f"bold {colours.warn}",
    }.get(verdict, "")


WIDE = 120
"""From this width the reason sits in the advice table's last column; narrower, under it."""


def _limit(row: KindPolicies) -> str:
    parts = []
    if row.max_running is not None:
        parts.append(f"{row.max_running} running")
    if row.rate_per_second is not None:
        parts.append(f"{row.rate_per_second:g}/s")
    return ", ".join(parts) or "—"


def policies_table(rows: list[KindPolicies], colours: Colours) -> Table:
    """What each kind runs under: its lease (its own, or the workers'), timeout, attempts,
    its fleet limit, the leases it holds and the due jobs waiting on the limit."""
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1),
                  title="Policies", title_justify="left", title_style="bold")
    table.add_column("Kind", no_wrap=True)
    table.add_column("Lease", justify="right", no_wrap=True)
    table.add_column("set by", no_wrap=True)
    table.add_column("Timeout", justify="right", no_wrap=True)
    table.add_column("Attempts", justify="right", no_wrap=True)
    table.add_column("Fleet limit", no_wrap=True)
    table.add_column("Held", justify="right", no_wrap=True)
    table.add_column("Waiting", justify="right", no_wrap=True)
    for row in rows:
        limited = row.max_running is not None or row.rate_per_second is not None
        table.add_row(
            Text(row.kind, "bold"),
            f"{row.lease:g} s",
            Text("kind", colours.info) if row.own_lease else Text("workers", colours.muted),
            f"{row.timeout:g} s" if row.timeout is not None else Text("none", colours.muted),
            str(row.max_attempts) if row.max_attempts is not None else Text(
                "default", colours.muted),
            _limit(row) if limited else Text("—", colours.muted),
            str(row.running) if row.max_running is not None else Text("—", colours.muted),
            Text(str(row.waiting), f"bold {colours.warn}" if row.waiting else "")
            if limited else Text("—", colours.muted),
        )
    return table


def advice_table(rows: list[KindPolicies], colours: Colours, *, wide: bool) -> Table:
    """What `advise` says of each kind's lease: its recorded attempts (handler p99, least
    margin at a renewal, the worst stall), the verdict and the suggested lease; the reason
    in the last column when `wide`."""
    table = Table(expand=wide, box=None, header_style="bold", pad_edge=False, padding=(0, 1),
                  title="Lease advice (taskboard advise)", title_justify="left",
                  title_style="bold")
    table.add_column("Kind", no_wrap=True)
    table.add_column("Samples", justify="right", no_wrap=True)
    table.add_column("p99", justify="right", no_wrap=True)
    table.add_column("Least margin" if wide else "Margin", justify="right", no_wrap=True)
    table.add_column("Stall", justify="right", no_wrap=True)
    table.add_column("Verdict", no_wrap=True)
    table.add_column("Suggested" if wide else "Suggest", justify="right", no_wrap=True)
    if wide:
        table.add_column("Why", ratio=1, min_width=12)
    for row in rows:
        timings, judged = row.timings, row.judgement
        if timings is None or judged is None:
            cells: list[RenderableType] = [Text(row.kind, "bold"), "0", "—", "—", "—",
                                           Text("—", colours.muted), "—"]
        else:
            cells = [
                Text(row.kind, "bold"),
                str(timings.samples),
                duration(timings.p99),
                duration(timings.least_margin),
                duration(judged.stall),
                Text(judged.verdict, verdict_style(judged.verdict, colours)),
                f"{judged.suggested_lease:g} s" if judged.suggested_lease is not None else "—",
            ]
        if wide:
            cells.append(Text(_reason(row), colours.muted))
        table.add_row(*cells)
    return table


def _reason(row: KindPolicies) -> str:
    return row.judgement.reason if row.judgement is not None else NOT_YET


def advice_tables(rows: list[KindPolicies], colours: Colours, *, wide: bool) -> RenderableType:
    """The policies, the advice, then (narrow) each kind's reason and, for a kind whose
    lease should change, the flag or line of code that sets it."""
    notes = Table.grid(padding=(0, 1))
    notes.add_column(no_wrap=True)
    notes.add_column()
    for row in rows:
        judged = row.judgement
        if not wide:
            notes.add_row(Text(f"{row.kind}:", "bold"), Text(_reason(row), colours.muted))
        if judged is not None and judged.suggested_lease is not None:
            notes.add_row(Text(f"{row.kind} lease:" if not wide else f"{row.kind}:", "bold"),
                          Text(f"set by {judged.set_by}", colours.muted))
    parts: list[RenderableType] = [policies_table(rows, colours), Text(""),
                                   advice_table(rows, colours, wide=wide)]
    if notes.row_count:
        parts += [Text(""), notes]
    return Group(*parts)


class AdviceScreen(ReadScreen[list[KindPolicies]]):
    """Each kind's policies and lease advice, read through `control.lease_advice`.

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
        super().__init__(control)
        self.advice: list[KindPolicies] | None = None
        """The latest answer, or None before the first."""

    def compose(self) -> ComposeResult:
        """The reading line, the tables (or why there are none), the rule, the footer."""
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
    def what(self) -> str:
        """What this screen reads."""
        return "lease advice"

    def read_call(self) -> Awaitable[list[KindPolicies]]:
        """`control.lease_advice`."""
        return self.control.lease_advice()

    async def show_answer(self, value: list[KindPolicies]) -> None:
        """Keep the answer and show it."""
        self.advice = value
        self._show(value)

    def _show(self, advice: list[KindPolicies]) -> None:
        colours = self._colours
        table = self.query_one("#advice-table", Static)
        line = self.query_one(ReadingLine)
        if not advice:
            line.status(Text.assemble(("Lease advice", "bold"), " · no kinds yet"))
            table.update(Text(EMPTY, colours.muted))
            return
        flagged = [a for a in advice if a.judgement is not None and a.judgement.verdict != "ok"]
        waiting = sum(a.waiting for a in advice)
        heading = Text.assemble(
            ("Lease advice", "bold"),
            f" · {len(advice)} kind{'' if len(advice) == 1 else 's'} · ",
        )
        if flagged:
            heading.append(f"{len(flagged)} to change", f"bold {colours.warn}")
        else:
            heading.append("every lease fits", colours.good)
        if waiting:
            heading.append(f" · {waiting} waiting on a limit", f"bold {colours.warn}")
        line.status(heading)
        table.update(advice_tables(advice, colours, wide=self.size.width >= WIDE))

    def on_resize(self) -> None:
        """Wide or narrow tables for the new width."""
        if self.advice:
            self._show(self.advice)
