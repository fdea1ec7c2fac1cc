"""`AttemptCard`: one attempt of a job on its detail screen, focusable to select it.

The story of a job is in its attempts: who claimed it, with which token, when each claim
ended or was taken over, and what the handler said. The error is shown whole and wrapped,
never cut, because the end of an error is often the part that explains it.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.text import Text
from taskboard.core.view.board import AttemptRow
from taskboard.tui.format import FAILURE_LABELS, Colours
from taskboard.tui.screens.reading import outcome_style, seconds, stamp
from textual.binding import Binding, BindingType
from textual.widgets import Static


def short_token(token: str) -> str:
    """First 8 hex digits, as the claims table shows them."""
    return token.replace("-", "")[:8]


def _outcome_word(outcome: str | None) -> str:
    if outcome is None:
        return "running"
    return FAILURE_LABELS.get(outcome, outcome.replace("_", " "))


class AttemptCard(Static, can_focus=True):
    """One attempt: ordinal, worker, token, times, outcome, durations and the full error.

    Focusable: the focused card is the selected attempt, whose token `t` copies.
    """

    DEFAULT_CSS = """
    AttemptCard {
        height: auto;
        padding: 0 1;
        margin-bottom: 1;
        border-left: tall $foreground 20%;
    }
    AttemptCard:focus {
        border-left: tall $primary;
        background: $boost;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Previous attempt", show=False),
        Binding("down,j", "move(1)", "Next attempt", show=False),
    ]

    def __init__(
        self,
        attempt: AttemptRow,
        colours: Colours,
        *,
        before: AttemptRow | None = None,
        after: AttemptRow | None = None,
    ) -> None:
        super().__init__(self.describe(attempt, colours, before=before, after=after),
                         markup=False)
        self.attempt = attempt
        """The attempt shown."""

    @staticmethod
    def describe(
        attempt: AttemptRow,
        colours: Colours,
        *,
        before: AttemptRow | None = None,
        after: AttemptRow | None = None,
    ) -> Text:
        """The card's text: a heading line, the times, the durations, the whole error.
        `before` and `after` are the job's neighbouring claims, to name who reclaimed the
        job from whom."""
        text = Text.assemble(
            (f"#{attempt.ordinal}", "bold"),
            "  ",
            (attempt.worker, "bold"),
            "  token ",
            (short_token(attempt.token), f"bold {colours.info}"),
            "  ",
            (_outcome_word(attempt.outcome), outcome_style(attempt.outcome, colours)),
        )
        if before is not None and before.superseded_at is not None:
            text.append(f"  reclaimed from {before.worker}", colours.warn)
        # In the order they happened: a late worker's end after the reclaim is the story.
        moments: list[tuple[str, datetime | None, str, str]] = [
            ("claimed", attempt.claimed_at, "", "")
        ]
        if attempt.renewal_failed_at is not None:
            moments.append(("renewal failed", attempt.renewal_failed_at, colours.warn, ""))
        if attempt.superseded_at is not None:
            by = f" by {after.worker} (#{after.ordinal})" if after is not None else ""
            moments.append(("reclaimed", attempt.superseded_at, colours.warn, by))
        if attempt.ended_at is not None:
            moments.append(("ended", attempt.ended_at, "", ""))
        moments.sort(key=lambda moment: moment[1] or attempt.claimed_at)
        if attempt.ended_at is None:
            moments.append(("ended", None, colours.muted, ""))
        # Two moments fit one line at 80 columns; a lost lease's timeline gets a line per
        # moment, so no label is wrapped away from its time.
        together = len(moments) <= 2
        for at, (label, moment, style, suffix) in enumerate(moments):
            text.append(" · " if together and at else "\n")
            text.append(label if together else f"{label:<15}")
            text.append(" " if together else "")
            text.append(stamp(moment, millis=True), style)
            text.append(suffix)
        text.append(
            f"\npickup {seconds(attempt.pickup_seconds)}"
            f" · handler {seconds(attempt.handler_seconds)}"
            f" · least margin {seconds(attempt.min_margin_seconds)}",
            colours.muted,
        )
        if attempt.error:
            text.append("\nerror: ", f"bold {colours.bad}")
            text.append(attempt.error)
        return text

    def action_move(self, step: int) -> None:
        """Select the previous or next attempt."""
        cards = list(self.screen.query(AttemptCard))
        at = cards.index(self) + step
        if 0 <= at < len(cards):
            cards[at].focus()
