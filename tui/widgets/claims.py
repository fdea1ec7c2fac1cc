"""The claims panel: jobs held under a lease, with a countdown on the database clock."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.board import BoardSnapshot, ClaimRow
from taskboard.tui.format import Colours, lease_cell, short
from taskboard.tui.widgets.table_sync import Cell, RowDiffer
from textual.widgets import DataTable

_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("job", "Job", 7),
    ("kind", "Kind", 8),
    ("worker", "Worker", 14),
    ("token", "Token", 8),
    ("attempt", "Try", 5),
    ("lease", "Lease left", 18),
)


MAX_ROWS = 100
"""Claims listed at most, nearest deadline first. Every listed countdown changes every
second, and updating a DataTable row costs the shared event loop time that the embedded
workers' renewals need (bench/dashboard.py measured 127 ms per frame at 1,000 rows)."""


class ClaimsTable(DataTable[Cell]):
    """Claimed jobs keyed by job id; each refresh recomputes `lease_expires_at - db_now`.

    The countdown is derived from the snapshot's DB time, never decremented locally, so a
    late or skipped refresh cannot make it drift from what the database will enforce.
    """

    def __init__(self, *, id: str | None = None) -> None:
        # No cursor: nothing acts on a claim, and a highlighted row would hide its colours.
        super().__init__(id=id, cursor_type="none")
        self.border_title = "Claims"
        self._rows = RowDiffer(self, [key for key, _, _ in _COLUMNS])

    def on_mount(self) -> None:
        """Add the columns; measuring their labels needs the running app."""
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        if not self.columns:
            for key, label, width in _COLUMNS:
                self.add_column(label, key=key, width=width)

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the claims of one snapshot; say how many more exist than are listed."""
        self._ensure_columns()
        listed = snapshot.claims[:MAX_ROWS]
        self._rows.apply(
            {str(claim.job_id): _cells(claim, snapshot, colours) for claim in listed}
        )
        counts = snapshot.counts
        # The database's count: only the nearest deadlines are listed, so counting the
        # listed rows would stop at MAX_ROWS.
        self.border_title = (
            f"Claims · {max(snapshot.claims_total, len(snapshot.claims))} claimed"
            f" ({counts.expired} expired) · {counts.pending} pending"
            f" · {counts.scheduled} scheduled"
            f" · {counts.completed} completed"
        )
        hidden = max(snapshot.claims_total, len(snapshot.claims)) - len(listed)
        self.border_subtitle = f"{hidden} more not shown" if hidden > 0 else ""


def _cells(claim: ClaimRow, snapshot: BoardSnapshot, colours: Colours) -> list[Cell]:
    last_try = claim.attempt >= claim.max_attempts
    return [
        Text(f"#{claim.job_id}", justify="right"),
        Text(short(claim.kind, 8)),
        Text(short(claim.worker_id, 14)),
        Text(claim.short_token, colours.muted),
        Text(f"{claim.attempt}/{claim.max_attempts}", colours.warn if last_try else ""),
        lease_cell(claim, snapshot.db_now, colours),
    ]
