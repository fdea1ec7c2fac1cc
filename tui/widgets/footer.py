"""The footer, with keys that a narrow terminal leaves to the help screen.

Textual's footer shows every binding or none; at 80 columns that cut the last keys off
("? He"). Each key gets a class for the width it needs (`-from-100`, `-from-160`, from
`Action.footer`), and the stylesheet hides those classes on narrower screens.
"""

from __future__ import annotations

from collections.abc import Iterable

from taskboard.tui.actions import ACTIONS, ALWAYS
from textual.widget import Widget
from textual.widgets import Footer

_LEVELS = {a.action: a.footer for a in ACTIONS}


class TaskboardFooter(Footer):
    """A compact footer whose keys carry the width they need as a class."""

    def compose(self) -> Iterable[Widget]:
        """Textual's keys, each tagged with its `-from-N` class when it has one."""
        for widget in super().compose():
            level = _LEVELS.get(str(getattr(widget, "action", "")), ALWAYS)
            if level != ALWAYS:
                widget.add_class(f"-from-{level}")
            yield widget
