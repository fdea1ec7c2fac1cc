"""Command palette entries for the dashboard's actions (ctrl+p).

The palette reaches the same actions as the keys; an entry that cannot run right now says
why in its help line, and choosing it anyway shows that reason instead of doing nothing.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from taskboard.tui.app import TaskboardApp


class TaskboardCommands(Provider):
    """Pause/resume/drain/crash the selected worker, add a worker, enqueue, retry, demo."""

    def _entries(self) -> list[tuple[str, str, str]]:
        app = cast("TaskboardApp", self.app)
        return app.palette_entries()

    async def discover(self) -> Hits:
        """All entries, shown before anything is typed."""
        app = cast("TaskboardApp", self.app)
        for title, help_text, action in self._entries():
            yield DiscoveryHit(title, partial(app.perform, action), help=help_text)

    async def search(self, query: str) -> Hits:
        """Entries whose title matches `query`, best first."""
        app = cast("TaskboardApp", self.app)
        matcher = self.matcher(query)
        for title, help_text, action in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(title), partial(app.perform, action), help=help_text
                )
