"""Pure formatting for the panels: ages, lease bars, state colours.

Kept free of widgets so the thresholds the legend promises can be tested directly, and so
rendering a refresh is a handful of string operations per row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qsl, urlsplit

from rich.text import Text
from taskboard.core.view.board import ClaimRow, LinkHealth
from textual.color import Color, ColorParseError

LEASE_BAR_WIDTH = 10
"""Cells in a lease countdown bar; narrow enough for the 80-column layout."""

HEALTHY_FRACTION = 0.5
"""More than this fraction of the lease left: green."""

LOW_FRACTION = 0.2
"""More than this (and at most HEALTHY_FRACTION) left: yellow; at or below it: red."""


@dataclass(frozen=True)
class Colours:
    """Semantic colours resolved from the app theme once, so cells are plain Rich styles."""

    good: str = "#4EBF71"
    warn: str = "#FFA62B"
    bad: str = "#BA3C5B"
    muted: str = "#8A8A8A"
    info: str = "#0178D4"

    @classmethod
    def from_theme(cls, variables: Mapping[str, str]) -> Colours:
        """Take `$success`, `$warning`, `$error`, muted text and `$primary` from a theme.

        Theme values may carry alpha (`$foreground-muted` is `#E0E0E099`), which Rich
        styles cannot express, so they are flattened onto `$background` here.
        """
        default = cls()
        background = variables.get("background", "#121212")

        def solid(name: str, fallback: str) -> str:
            try:
                colour = Color.parse(variables.get(name, fallback))
                if colour.a < 1:
                    colour = Color.parse(background) + colour
            except ColorParseError:
                return fallback
            return colour.hex6

        return cls(
            good=solid("success", default.good),
            warn=solid("warning", default.warn),
            bad=solid("error", default.bad),
            muted=solid("foreground-muted", default.muted),
            info=solid("primary", default.info),
        )


def lease_fraction(claim: ClaimRow, now: datetime) -> float:
    """Share of the lease left at DB time `now`, clamped to 0..1."""
    if claim.lease_seconds <= 0:
        return 0.0
    return min(1.0, max(0.0, claim.seconds_left(now) / claim.lease_seconds))


def lease_level(fraction: float, seconds_left: float) -> str:
    """Which of the legend's four lease bands: "ok", "low", "critical" or "expired"."""
    if seconds_left <= 0:
        return "expired"
    if fraction > HEALTHY_FRACTION:
        return "ok"
    if fraction > LOW_FRACTION:
        return "low"
    return "critical"


def lease_cell(
    claim: ClaimRow, now: datetime, colours: Colours, bar: int = LEASE_BAR_WIDTH
) -> Text:
    """The countdown cell of a claim at DB time `now`, its bar `bar` cells long."""
    return lease_bar(lease_fraction(claim, now), claim.seconds_left(now), colours, bar)


def lease_bar(
    fraction: float, seconds_left: float, colours: Colours, bar: int = LEASE_BAR_WIDTH
) -> Text:
    """A bar plus the seconds left, or EXPIRED; the words carry what the colour shows."""
    level = lease_level(fraction, seconds_left)
    if level == "expired":
        return Text.assemble(
            ("░" * bar, colours.muted),
            " ",
            ("EXPIRED", f"bold reverse {colours.bad}"),
        )
    colour = {"ok": colours.good, "low": colours.warn, "critical": colours.bad}[level]
    filled = max(1, round(fraction * bar))
    return Text.assemble(
        ("█" * filled, colour),
        ("░" * (bar - filled), colours.muted),
        " ",
        (f"{seconds_left:5.1f}s", colour),
    )


AGE_WIDTH = 6
"""The most characters `age` returns below 100 days ("59m59s", "23h59m", "99d23h"): a
column of "… ago" is `AGE_WIDTH + 4` wide and never cuts one."""


def age(seconds: float) -> str:
    """A short human age: "3s", "4m05s", "2h10m", "3d04h"; never negative (clock skew
    shows as 0s)."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86_400:
        return f"{whole // 3600}h{(whole % 3600) // 60:02d}m"
    return f"{whole // 86_400}d{(whole % 86_400) // 3600:02d}h"


def clock(moment: datetime) -> str:
    """HH:MM:SS of a DB timestamp, as shown in the header and the failures log."""
    return moment.strftime("%H:%M:%S")


def worker_state_style(state: str, colours: Colours) -> str:
    """Style of a worker state word: running green, paused yellow, gone red."""
    return {
        "running": colours.good,
        "paused": f"bold {colours.warn}",
        "draining": colours.info,
        "stopped": colours.muted,
        "gone": f"bold {colours.bad}",
    }.get(state, "")


FAILURE_LABELS: dict[str, str] = {
    "renewal_failed": "renewal failed",
    "lease_lost": "lease lost",
    "effect_refused": "send stopped by deadline",
    "completion_rejected": "completion rejected",
    "failed": "handler failed",
    "dead": "dead",
    "cancelled": "cancelled",
}
"""Words for failure outcomes; the log never shows a bare colour."""


def failure_style(outcome: str, colours: Colours) -> str:
    """Fence rejections and dead jobs in red, lost or unrenewed leases in yellow, an
    operator's cancel in the neutral colour."""
    if outcome in ("completion_rejected", "dead"):
        return f"bold {colours.bad}"
    if outcome == "cancelled":
        # An operator's decision, not a fault: no alarm colour.
        return colours.info
    return colours.warn


def short(text: str, width: int) -> str:
    """Cut `text` to `width` cells with an ellipsis, keeping one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


NO_ANSWER_AFTER = 2.0
"""Seconds a database call may wait before the dashboard says it gets no answer: a board
read takes milliseconds, so two seconds without one is a database in trouble."""


def health_problem(health: LinkHealth, connected: bool) -> bool:
    """True when the database is not answering: a call has waited `NO_ANSWER_AFTER`
    seconds or more, the last one failed, or the last refresh came back disconnected."""
    waiting = health.waiting_for is not None and health.waiting_seconds >= NO_ANSWER_AFTER
    return waiting or health.last_error is not None or not connected


def health_banner(
    health: LinkHealth, connected: bool, data_age: float | None, error: str | None = None
) -> str | None:
    """The banner's words while the database does not answer; None while it does.

    "no answer from the database for N s — data on screen is M s old", then what the link
    waits for or why its last use failed. N counts from the last answer, however many
    timed-out refreshes came since; M from the last board drawn.
    """
    if not health_problem(health, connected):
        return None
    if health.last_answer_age is None:
        text = "no answer from the database yet"
    else:
        text = f"no answer from the database for {age(health.last_answer_age)}"
    text += " — " + (
        "no data on screen yet" if data_age is None else f"data on screen is {age(data_age)} old"
    )
    if health.waiting_for is not None and health.waiting_seconds >= 1:
        text += f"; {health.waiting_for}, waiting {age(health.waiting_seconds)}"
    reason = health.last_error or error
    if reason:
        text += f"; last error: {reason}"
    return text


def waiting_line(what: str, seconds: float) -> str:
    """What a key's command is doing while the database keeps it waiting, e.g.
    "retrying job #3… waiting for the database (2 s)"."""
    return f"{what}… waiting for the database ({int(seconds)} s)"


def elide_dsn(dsn: str, width: int) -> str:
    """The database for the header in at most `width` cells: the whole (masked) DSN if it
    fits, else host:port/database (the part an operator tells databases apart by), or for
    a Unix socket (the embedded server's) "database on socket DIR", "database on local
    socket", the database's name; only when none fits, the last of them cut in the middle
    so both ends stay readable."""
    if len(dsn) <= width:
        return dsn
    forms = _short_forms(dsn)
    for form in forms:
        if len(form) <= width:
            return form
    short_form = forms[-1] if forms else dsn
    if width <= 1:
        return "…"[:width]
    head = (width - 1) // 2
    tail = width - 1 - head
    return short_form[:head] + "…" + (short_form[-tail:] if tail else "")


def _short_forms(dsn: str) -> list[str]:
    """Shorter names of the same database, longest first."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return []
    database = parts.path.lstrip("/")
    if host:
        return [f"{host}{port}{parts.path}"]
    socket = next(
        (v for k, v in parse_qsl(parts.query) if k == "host" and v.startswith("/")), None
    )
    if socket is None or not database:
        return []
    return [f"{database} on socket {socket}", f"{database} on local socket", database]
