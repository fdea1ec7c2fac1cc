"""The narration panel: the training scenario's current step, in demo mode only."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.view.control import ScenarioProgress
from taskboard.tui.format import Colours
from textual.widgets import Static


class Narration(Static):
    """Title, narration and status of the current demo step: what the next step waits for
    (warning colour), or what the board shows it ready for (n will act)."""

    def show(self, progress: ScenarioProgress, colours: Colours, *, busy: bool = False) -> None:
        """Render the step; `busy` while the step's commands are still being sent."""
        if progress.index == 0:
            self.border_title = "Training scenario"
        else:
            self.border_title = f"Training scenario · step {progress.index}/{progress.total}"
        text = Text.assemble((progress.title, "bold"), "\n", progress.narration, "\n")
        if busy:
            text.append("working…", colours.muted)
        elif progress.status and progress.ready:
            text.append(progress.status, colours.good)
        elif progress.status:
            text.append(progress.status, f"bold {colours.warn}")
        elif progress.finished:
            text.append("End of the story; the board stays live. R tells it again.", colours.muted)
        else:
            text.append("n: next step", colours.muted)
        self.update(text)
