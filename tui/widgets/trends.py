"""Trends: the last minutes of the fleet as four text sparklines.

Completions per second, pickup latency (median of the latest claims), renewal lateness and
lost leases, one line each with its latest value; the border says the span and the bar
width. Text sparklines rather than Textual's `Sparkline`: one widget instead of four, gaps
(no sample in a bucket) drawn as gaps, and it is drawn from the data alone (no clock), so a
snapshot is the same on every run.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from taskboard.core.view.board import Trends
from taskboard.tui.format import Colours, age
from textual.app import RenderResult
from textual.widget import Widget

BARS = "▁▂▃▄▅▆▇█"
"""Eight heights; the lowest also stands for zero, so a flat quiet line stays visible."""

GAP = " "
"""A bucket with no sample (no claim, no renewal): nothing measured, not zero."""

LABEL_WIDE = 17
LABEL_NARROW = 9
VALUE_WIDTH = 9
MIN_SPARK = 8
"""Below this many bars the line is not worth drawing; the value is still shown."""


def spark(values: Sequence[float | None], width: int) -> str:
    """The last `width` values as bars scaled from zero to their maximum."""
    shown = list(values)[-width:] if width > 0 else []
    top = max((v for v in shown if v is not None), default=0.0)
    cells = []
    for value in shown:
        if value is None:
            cells.append(GAP)
        elif top <= 0 or value <= 0:
            cells.append(BARS[0])
        else:
            cells.append(BARS[min(len(BARS) - 1, max(1, round(value / top * (len(BARS) - 1))))])
    return "".join(cells)


def latest(values: Sequence[float | None]) -> float | None:
    """The newest bucket's value (None when it had no sample)."""
    return values[-1] if values else None


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


class TrendsPanel(Widget):
    """Four sparklines over the last minutes: 4 lines inside a border, 6 rows in all.

    `show` stores the trends; drawing happens at the widget's current width, so a resize
    shows more or fewer buckets (newest on the right) without new data.
    """

    DEFAULT_CSS = """
    TrendsPanel {
        height: 6;
        padding: 0 1;
        border: round $foreground 25%;
        border-title-color: $foreground;
        border-subtitle-color: $foreground-muted;
        background: $surface;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.trends: Trends | None = None
        """What is drawn; None until the first `show`."""
        self._colours = Colours()
        self.border_title = "Trends"

    def show(self, trends: Trends, colours: Colours) -> None:
        """Draw `trends` (skipped when nothing changed)."""
        if trends == self.trends and colours == self._colours:
            return
        self.trends = trends
        self._colours = colours
        self._retitle()
        self.refresh()

    def on_resize(self) -> None:
        """The span shown depends on how many bars fit."""
        self._retitle()

    def _layout(self) -> tuple[bool, int, int]:
        # (narrow, label width, bars) for the current width.
        width = self.content_region.width or self.size.width
        narrow = width < 70
        label_width = LABEL_NARROW if narrow else LABEL_WIDE
        return narrow, label_width, max(0, width - label_width - VALUE_WIDTH - 1)

    def _retitle(self) -> None:
        trends = self.trends
        if trends is None:
            return
        narrow, _, bars = self._layout()
        buckets = min(bars, max(len(trends.completed_per_s), len(trends.pickup_p50),
                                len(trends.renewal_lateness), len(trends.lost)))
        span = age(buckets * trends.step) if buckets else "—"
        self.border_title = f"Trends · last {span}" + (
            "" if narrow else f", {trends.step:g} s a bar")
        self.border_subtitle = f"lateness: {trends.lateness_scope}"

    def render(self) -> RenderResult:
        """The four lines at the current width."""
        trends = self.trends
        colours = self._colours
        if trends is None:
            return Text("no trends yet", colours.muted)
        narrow, label_width, bars = self._layout()
        lost = [float(v) for v in trends.lost]
        rows = (
            ("completed/s", "done/s", trends.completed_per_s, colours.good,
             _rate(latest(trends.completed_per_s))),
            ("pickup p50", "pickup", trends.pickup_p50, colours.info,
             _seconds(latest(trends.pickup_p50))),
            ("renewal lateness", "late", trends.renewal_lateness, colours.warn,
             _seconds(latest(trends.renewal_lateness))),
            ("lost leases", "lost", lost, colours.bad,
             str(trends.lost[-1]) if trends.lost else "—"),
        )
        text = Text(no_wrap=True, overflow="crop")
        for at, (wide_label, narrow_label, values, colour, value) in enumerate(rows):
            if at:
                text.append("\n")
            label = narrow_label if narrow else wide_label
            text.append(f"{label:<{label_width}}", "bold")
            if bars >= MIN_SPARK:
                line = spark(values, bars)
                text.append(f"{line:>{bars}}", colour if any(values) else colours.muted)
                text.append(" ")
            text.append(f"{value:>{VALUE_WIDTH}}")
        return text


def _rate(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f}/s"
