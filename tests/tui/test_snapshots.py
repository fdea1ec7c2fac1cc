"""Every screen, pinned as an SVG: same fixed board, frozen clocks, fixed terminal sizes.

Update the baselines on purpose with `uv run pytest tests/tui/test_snapshots.py
--snapshot-update` and look at the SVGs (they are under `__snapshots__/`); the same scenes
become `screenshots/*.svg` through `uv run python screenshots/generate.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.tui.sample_scenes import (
    DEMO_STEPS,
    SMALL,
    Scene,
    db_down_scene,
    demo_scene,
    help_scene,
    main_scene,
)

SnapCompare = Callable[..., bool]


def matches(snap_compare: SnapCompare, scene: Scene) -> bool:
    return snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


def test_main_screen(snap_compare: SnapCompare) -> None:
    """Workers (one paused, one remote), six claims across every lease band incl. EXPIRED,
    pool headroom, effects with a duplicate email and a replayed charge, a dead job and a
    failures log with a rejected completion."""
    assert matches(snap_compare, main_scene())


def test_help_screen(snap_compare: SnapCompare) -> None:
    """`?` lists every key and the colour legend over the main screen."""
    assert matches(snap_compare, help_scene())


@pytest.mark.parametrize("step", range(DEMO_STEPS + 1))
def test_demo_step(snap_compare: SnapCompare, step: int) -> None:
    """The training scenario's narration after `step` presses of `n`, over the board the
    article's timeline reaches at that point."""
    assert matches(snap_compare, demo_scene(step))


def test_database_down_banner(snap_compare: SnapCompare) -> None:
    """A failed refresh: the banner names the error and the age of the data; the panels
    keep the last good board, dimmed."""
    assert matches(snap_compare, db_down_scene())


def test_small_terminal(snap_compare: SnapCompare) -> None:
    """80x24: panels stack and the body scrolls; the footer still shows help and quit."""
    assert matches(snap_compare, main_scene(SMALL, "small-80x24"))
