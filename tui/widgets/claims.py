"""The claims panel: jobs held under a lease, with a countdown on the database clock."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot, ClaimRow
from taskboard.tui.format import Colours, lease_cell, short
from taskboard.tui.widgets.keyed_table import Column, KeyedTable
from textual import events

MAX_ROWS = 100
"""Claims listed at most, nearest deadline first, whatever the panel's height. Every listed
countdown changes every second, and each changed row costs the UI's loop a repaint."""


TITLE_FRAME = 6
"""Border cells around a title: the corner, a rule and a space on each side."""

class ClaimsTable(KeyedTable[ClaimRow]):
    """Claimed jobs keyed by job id; each refresh recomputes `lease_expires_at - db_now`.

    The countdown is derived from the snapshot's DB time, never decremented locally, so a
    late or skipped refresh cannot make it drift from what the database will enforce. As
    many claims are listed as the panel has lines for (nearest deadlines first), so "N
    more" is said only when the panel is full.
    """

    COLUMNS: ClassVar[tuple[Column, ...]] = (
        Column("job", "Job", 6),
        # The lease story is told by the holder, the token and the countdown: a narrow
        # table keeps them (with a shorter bar) and drops the kind first.
        Column("kind", "Kind", 7, from_width=74),
        Column("worker", "Worker", 12),
        Column("token", "Token", 8, from_width=60),
        Column("attempt", "Try", 4),
        Column("lease", "Lease left", 18, from_width=90),
        Column("lease", "Lease", 13, until_width=90),
        Column("note", "", 10, flex=True),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, title="Claims")
        self._snapshot: BoardSnapshot | None = None
        self._colours = Colours()

    @property
    def fits(self) -> int:
        """Rows the panel shows without scrolling (all of MAX_ROWS before the first layout)."""
        if not self.size.height:
            return MAX_ROWS
        return max(1, min(MAX_ROWS, self.size.height - 1))  # one line for the header

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the claims of one snapshot; say how many more exist than are listed."""
        self._snapshot, self._colours = snapshot, colours
        listed = snapshot.claims[: self.fits]
        self.show_items([(str(c.job_id), c) for c in listed])
        counts = snapshot.counts
        # The database's count: only the nearest deadlines are read and listed.
        total = max(snapshot.claims_total, len(snapshot.claims))
        head = f"Claims · {total} claimed ({counts.expired} expired) · {counts.pending} pending"
        cancelled = f" · {counts.cancelled} cancelled" if counts.cancelled else ""
        scheduled = f" · {counts.scheduled} scheduled"
        # Longest first; the first that fits the border whole (at 80 columns the full one
        # was cut mid-word). The claims' own numbers go last.
        titles = [
            f"{head}{scheduled} · {counts.completed} completed{cancelled}",
            f"{head}{scheduled} · {counts.completed} done{cancelled}",
            f"{head}{scheduled} · {counts.completed} done",
            f"{head}{scheduled}",
            head,
            f"Claims · {total} claimed ({counts.expired} expired)",
        ]
        room = self.size.width - TITLE_FRAME if self.size.width else None
        self.border_title = next(
            (t for t in titles if room is None or len(t) <= room), titles[-1]
        )
        hidden = total - len(listed)
        if hidden <= 0:
            self.border_subtitle = ""
        elif len(listed) < self.fits:
            # Room left, yet fewer rows than claims: the board read only the nearest ones.
            self.border_subtitle = f"the {len(listed)} nearest deadlines of {total}"
        else:
            self.border_subtitle = f"{hidden} more, later deadlines"

    def on_resize(self, _event: events.Resize) -> None:
        """List as many claims as now fit (the base class re-plans the columns too)."""
        if self._snapshot is not None:
            self.show(self._snapshot, self._colours)

    def cells(self, item: ClaimRow, widths: dict[str, int]) -> list[Text]:
        """One claim's row: EXPIRED in words once the deadline passed, and the worker a
        reclaim took the job from."""
        assert self._snapshot is not None
        claim, colours = item, self._colours
        last_try = claim.attempt >= claim.max_attempts
        row = {
            "job": Text(f"#{claim.job_id}", justify="right"),
            "kind": Text(short(claim.kind, widths.get("kind", 7))),
            "worker": Text(short(claim.worker_id, widths["worker"])),
            "token": Text(claim.short_token, colours.muted),
            "attempt": Text(
                f"{claim.attempt}/{claim.max_attempts}", colours.warn if last_try else ""
            ),
            "lease": lease_cell(claim, self._snapshot.db_now, colours, widths["lease"] - 8),
            "note": _note(claim, self._snapshot, widths["note"], colours),
        }
        return [row[key] for key in widths]


def _note(claim: ClaimRow, snapshot: BoardSnapshot, width: int, colours: Colours) -> Text:
    if claim.reclaimed_from:
        for text in (f"← reclaimed from {claim.reclaimed_from}", f"← from {claim.reclaimed_from}"):
            if len(text) <= width:
                return Text(text, colours.info)
        return Text(short(f"← {claim.reclaimed_from}", width), colours.info)
    if claim.seconds_left(snapshot.db_now) < 0:
        return Text(short("up for reclaim", width), colours.bad)
    return Text("")
