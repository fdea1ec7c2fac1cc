"""Keep a DataTable in step with keyed rows by touching only what changed.

`DataTable.clear()` resets the cursor and scroll position, so rebuilding a table every
refresh would make the operator's selection jump back to the first row once a second.
Rows are matched by domain id (worker id, job id) instead: stale rows are removed, changed
cells updated in place, new rows appended.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from rich.text import Text
from textual.widgets import DataTable

Cell = str | Text
"""A cell as the panels produce it; plain `str` cells are Rich markup, so only our own text."""


def _fingerprint(cell: Cell) -> Hashable:
    # Text.__eq__ ignores the base style, and a lease cell that only changes colour must
    # still be repainted, so compare plain text, base style and spans explicitly.
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), tuple(cell.spans))
    return cell


class RowDiffer:
    """Applies keyed rows to a DataTable whose columns were added with string keys."""

    def __init__(self, table: DataTable[Cell], columns: Sequence[str]) -> None:
        self._table = table
        self._columns = tuple(columns)
        self._shown: dict[str, tuple[Hashable, ...]] = {}

    @property
    def keys(self) -> list[str]:
        """Row keys currently in the table, in display order."""
        return list(self._shown)

    def apply(self, rows: Mapping[str, Sequence[Cell]]) -> bool:
        """Make the table show exactly `rows` (key -> cells); return True if anything changed.

        Width is never recomputed per update (`update_width=False`): a width change makes
        DataTable re-measure every row, the cost Textual issue #6457 measured at 60 % CPU.
        """
        table = self._table
        changed = False
        for key in [key for key in self._shown if key not in rows]:
            table.remove_row(key)
            del self._shown[key]
            changed = True
        for key, cells in rows.items():
            prints = tuple(_fingerprint(cell) for cell in cells)
            before = self._shown.get(key)
            if before is None:
                table.add_row(*cells, key=key)
                changed = True
            elif before != prints:
                for column, cell, old, new in zip(
                    self._columns, cells, before, prints, strict=True
                ):
                    if old != new:
                        table.update_cell(key, column, cell, update_width=False)
                changed = True
            self._shown[key] = prints
        return changed
