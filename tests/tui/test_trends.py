"""Trends: four sparklines with their latest values and the span they cover, in six rows,
drawn from the data alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from taskboard.core.view.board import Trends
from taskboard.tui.format import Colours
from taskboard.tui.widgets.trends import BARS, GAP, TrendsPanel, spark
from textual.app import App, ComposeResult

from tests.tui.fakes_screens import LARGE, SMALL, sample_trends, shown_text, trends_scene

SnapCompare = Callable[..., bool]


def test_spark_scales_from_zero_to_the_highest_value_and_keeps_gaps() -> None:
    assert spark([0.0, 1.0, 2.0, 4.0], 10) == BARS[0] + BARS[2] + BARS[4] + BARS[7]
    assert spark([None, 3.0, None], 10) == GAP + BARS[7] + GAP
    assert spark([0.0, 0.0], 10) == BARS[0] * 2  # quiet, not missing
    assert spark([0.001, 100.0], 10)[0] == BARS[1]  # above zero never looks like zero
    assert spark([float(v) for v in range(20)], 5) == spark([15.0, 16.0, 17.0, 18.0, 19.0], 5)
    assert spark([1.0], 0) == ""


class PanelApp(App[None]):
    def __init__(self, trends: Trends | None) -> None:
        super().__init__()
        self.trends = trends

    def compose(self) -> ComposeResult:
        yield TrendsPanel()

    def on_mount(self) -> None:
        if self.trends is not None:
            self.query_one(TrendsPanel).show(self.trends, Colours())


async def drawn(trends: Trends | None, width: int) -> tuple[TrendsPanel, list[str]]:
    app = PanelApp(trends)
    async with app.run_test(size=(width, 12)) as pilot:
        await pilot.pause()
        panel = app.query_one(TrendsPanel)
        lines = shown_text(panel).splitlines()
        return panel, lines


@pytest.mark.parametrize("width", [160, 80])
async def test_four_lines_with_latest_values_and_the_span(width: int) -> None:
    trends = sample_trends()
    panel, lines = await drawn(trends, width)
    assert panel.outer_size.height == 6
    body = [line.strip("│ ") for line in lines[1:5]]
    assert body[0].startswith("completed/s") and body[0].endswith("3.0/s")
    assert body[1].startswith("pickup p50") and body[1].endswith("90 ms")
    assert body[2].startswith("renewal lateness") and body[2].endswith("20 ms")
    assert body[3].startswith("lost leases") and body[3].endswith("0")
    # The stall: the lost leases' bar is the only full one, where the lateness peaks.
    assert body[3].count(BARS[-1]) == 1
    assert all(len(line) <= width for line in lines)
    title = str(panel.border_title)
    if width == 160:
        assert title == "Trends · last 5m00s, 5 s a bar"  # all 60 buckets fit
    else:
        bars = body[0].count(BARS[0]) + sum(body[0].count(b) for b in BARS[1:])
        assert title == f"Trends · last {bars * 5 // 60}m{bars * 5 % 60:02d}s, 5 s a bar"
    assert str(panel.border_subtitle) == "lateness: this dashboard's workers"


async def test_narrow_panels_shorten_the_labels_and_keep_the_values() -> None:
    _, lines = await drawn(sample_trends(), 40)
    body = [line.strip("│ ") for line in lines[1:5]]
    assert [line.split()[0] for line in body] == ["done/s", "pickup", "late", "lost"]
    assert [line.split()[-1] for line in body] == ["3.0/s", "ms", "ms", "0"]
    _, tiny = await drawn(sample_trends(), 24)  # no room for bars: values only
    assert tiny[1].strip("│ ").split() == ["done/s", "3.0/s"]


async def test_no_data_yet_and_empty_buckets() -> None:
    _, lines = await drawn(None, 80)
    assert "no trends yet" in lines[1]
    panel, lines = await drawn(Trends(), 80)
    assert str(panel.border_title) == "Trends · last —, 5 s a bar"
    assert lines[1].strip("│ ").split() == ["completed/s", "—"]


async def test_the_same_trends_draw_the_same_lines() -> None:
    _, first = await drawn(sample_trends(), 100)
    _, again = await drawn(sample_trends(), 100)
    assert first == again


def test_snapshot_80x24(snap_compare: SnapCompare) -> None:
    scene = trends_scene(SMALL)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


def test_snapshot_160x45(snap_compare: SnapCompare) -> None:
    scene = trends_scene(LARGE)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)
