"""The dead jobs panel: jobs that will not be retried unless an operator says so."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot, DeadRow
from taskboard.tui.format import AGE_WIDTH, Colours, age, short
from taskboard.tui.widgets.keyed_table import Column, KeyedTable


class DeadJobsTable(KeyedTable[DeadRow]):
    """Dead jobs keyed by job id, newest first; the cursor row is the job `r` retries and
    Enter opens while this table has the focus. The error takes the width the panel has
    (its full text is in the job's detail)."""

    COLUMNS: ClassVar[tuple[Column, ...]] = (
        Column("job", "Job", 6),
        Column("kind", "Kind", 7),
        Column("tries", "Tries", 5, from_width=60),
        Column("age", "Died", AGE_WIDTH + 4, from_width=70),
        Column("error", "Last error", 19, flex=True),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, title="Dead jobs")
        self._snapshot: BoardSnapshot | None = None
        self._colours = Colours()

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the dead jobs of one snapshot."""
        self._snapshot, self._colours = snapshot, colours
        self.show_items([(str(row.job_id), row) for row in snapshot.dead])
        total = max(snapshot.counts.dead, len(snapshot.dead))
        self.border_title = f"Dead jobs · {total}"

    def cells(self, item: DeadRow, widths: dict[str, int]) -> list[Text]:
        """One dead job's row."""
        assert self._snapshot is not None
        died = (self._snapshot.db_now - item.failed_at).total_seconds()
        row = {
            "job": Text(f"#{item.job_id}", justify="right"),
            "kind": Text(short(item.kind, widths["kind"])),
            "tries": Text(str(item.attempts), justify="right"),
            "age": Text(f"{age(died)} ago", self._colours.muted, justify="right"),
            "error": Text(short(item.last_error, widths["error"]), self._colours.bad),
        }
        return [row[key] for key in widths]
