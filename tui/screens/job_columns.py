"""The jobs list's columns and rows: what each state's time column holds, the sort orders,
the cells of a row and the status line under the tabs. Pure functions of the rows, so the
screen (`jobs.py`) only reads, lays out and reacts to keys."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.text import Text
from taskboard.core.view.board import JobListRow
from taskboard.tui.format import Colours, short
from taskboard.tui.screens.reading import stamp
from taskboard.tui.widgets.table_sync import Cell

STATES = ("pending", "scheduled", "running", "completed", "dead", "cancelled")
"""The states `BoardControl.list_jobs` lists, in the order of the tabs (keys 1 to 6)."""

LIST_LIMIT = 200
"""Rows core returns at most per list (`list_jobs`' limit); a full page says so."""

WIDE = 110
"""From this width the table also shows queue, priority, worker and the date."""


WHEN_LABELS: dict[str, str] = {
    "pending": "Due",
    "scheduled": "Runs at",
    "running": "Lease until",
    "completed": "Finished",
    "dead": "Died",
    "cancelled": "Cancelled",
}
"""What the time column holds for each state."""


def when_of(row: JobListRow, state: str) -> datetime | None:
    if state in ("pending", "scheduled"):
        return row.run_at
    if state == "running":
        return row.lease_expires_at
    return row.finished_at


# Sort keys: (column key, label). None sorts after every value in either direction.
SORTS: tuple[tuple[str, str], ...] = (
    ("id", "Job"),
    ("kind", "Kind"),
    ("queue", "Queue"),
    ("priority", "Pri"),
    ("attempts", "Att"),
    ("when", "When"),
    ("worker", "Worker"),
    ("error", "Error"),
)


def sort_value(row: JobListRow, column: str, state: str) -> Any:
    """The value rows are ordered by for `column`."""
    values: dict[str, Any] = {
        "id": row.id,
        "kind": row.kind,
        "queue": row.queue,
        "priority": row.priority,
        "attempts": row.attempts,
        "when": when_of(row, state),
        "worker": row.claimed_by,
        "error": row.last_error or None,
    }
    return values[column]


def sorted_rows(
    rows: list[JobListRow], column: str | None, descending: bool, state: str
) -> list[JobListRow]:
    """`rows` ordered by `column` (None: as core listed them), empty values last."""
    if column is None:
        return list(rows)
    present = [r for r in rows if sort_value(r, column, state) is not None]
    missing = [r for r in rows if sort_value(r, column, state) is None]
    present.sort(key=lambda r: (sort_value(r, column, state), r.id), reverse=descending)
    return present + missing


def columns(wide: bool) -> list[tuple[str, int]]:
    """(key, width) of every column but the error, which takes what is left."""
    when = 14 if wide else 8
    if wide:
        return [("id", 6), ("kind", 10), ("queue", 10), ("priority", 3), ("attempts", 5),
                ("when", when), ("worker", 12)]
    return [("id", 6), ("kind", 8), ("attempts", 5), ("when", when)]


def row_cells(
    row: JobListRow, state: str, *, wide: bool, error_width: int, colours: Colours
) -> list[Cell]:
    """The cells of one job, in the order of `columns(wide)` plus the error."""
    moment = when_of(row, state)
    when = stamp(moment) if not wide or moment is None else (
        moment.strftime("%m-%d %H:%M:%S"))
    error = Text(short(row.last_error, error_width), colours.bad) if (
        row.last_error) else Text("—", colours.muted)
    cells: list[Cell] = [Text(f"#{row.id}", justify="right"), Text(short(row.kind, 10))]
    if wide:
        cells += [Text(short(row.queue, 10)), Text(str(row.priority), justify="right")]
    cells += [Text(f"{row.attempts}/{row.max_attempts}", justify="right"), Text(when)]
    if wide:
        cells.append(Text(short(row.claimed_by or "—", 12)))
    cells.append(error)
    return cells


def list_status(
    count: int, state: str, needle: str | None, sort_column: str | None, descending: bool,
    colours: Colours,
) -> Text:
    """What the list holds: how many jobs of the state, the filter and the sort order."""
    text = Text()
    noun = "job" if count == 1 else "jobs"
    if count == 0:
        text.append(f"no {state} jobs", colours.muted)
    else:
        full = count >= LIST_LIMIT
        text.append(f"{'first ' if full else ''}{count} {state} {noun}", "bold")
    if needle:
        text.append(f" matching {needle!r}")
        text.append(" (escape clears)", colours.muted)
    if sort_column is not None:
        label = dict(SORTS)[sort_column]
        if sort_column == "when":
            label = WHEN_LABELS[state]
        text.append(f" · sorted by {label.lower()} {'▼' if descending else '▲'}")
        text.append(" (S reverses)", colours.muted)
    text.append(" · Enter opens a job", colours.muted)
    return text
