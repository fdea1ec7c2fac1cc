"""The legend's promises: lease bands, EXPIRED in words, ages, theme colours."""

from __future__ import annotations

import pytest
from taskboard.tui.format import Colours, age, lease_bar, lease_cell, lease_level

from tests.tui.sample_board import DB_NOW, claim


@pytest.mark.parametrize(
    ("fraction", "seconds_left", "level"),
    [
        (1.0, 60.0, "ok"),
        (0.51, 30.6, "ok"),
        (0.5, 30.0, "low"),
        (0.21, 12.6, "low"),
        (0.2, 12.0, "critical"),
        (0.01, 0.6, "critical"),
        (0.0, 0.0, "expired"),
        (0.0, -5.0, "expired"),
    ],
)
def test_lease_bands_follow_the_fraction_left(
    fraction: float, seconds_left: float, level: str
) -> None:
    assert lease_level(fraction, seconds_left) == level


def test_expired_lease_says_so_in_words_not_only_colour() -> None:
    cell = lease_cell(claim(1, "email", "w", seconds_left=-3, token_no=1), DB_NOW, Colours())
    assert cell.plain.endswith("EXPIRED")
    live = lease_cell(claim(1, "email", "w", seconds_left=6.2, token_no=1), DB_NOW, Colours())
    assert live.plain.endswith("6.2s")


def test_lease_colour_changes_with_the_band() -> None:
    colours = Colours()
    styles = [
        str(lease_bar(fraction, fraction * 60, colours).spans[0].style)
        for fraction in (0.9, 0.3, 0.1)
    ]
    assert styles == [colours.good, colours.warn, colours.bad]


def test_bar_is_empty_only_when_expired() -> None:
    # A lease with a sliver left still shows one cell, so "almost gone" != "gone".
    assert lease_bar(0.01, 0.6, Colours()).plain.startswith("█")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-2, "0s"), (0.9, "0s"), (59, "59s"), (60, "1m00s"), (3599, "59m59s"), (7260, "2h01m")],
)
def test_age_is_short_and_never_negative(seconds: float, text: str) -> None:
    assert age(seconds) == text


def test_theme_colours_are_flattened_to_opaque_hex() -> None:
    colours = Colours.from_theme(
        {"success": "#00FF00", "foreground-muted": "#FFFFFF80", "background": "#000000"}
    )
    assert colours.good == "#00FF00"
    assert colours.muted == "#808080"
    assert colours.bad == Colours().bad
