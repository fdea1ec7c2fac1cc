"""A yes/no question before a command that cannot be taken back (retry, cancel, crash)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Asks `question` (which names the job or worker); dismisses with True only on an
    explicit yes: `y`, or Enter or a click on the yes button. `n`, Escape, `q` or the No
    button dismiss with False. No is focused first, so a stray Enter never confirms.

    Args:
        question: the whole question, e.g. "Retry dead job #42 (billing)?" plus what may
            happen again; wrapped to the frame.
        yes: the yes button's label, e.g. "Retry job #42".
    """

    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
    }
    ConfirmScreen > #confirm-frame {
        width: 64;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        padding: 0 1;
        border: thick $warning;
        border-title-color: $warning;
        border-title-style: bold;
        background: $surface;
    }
    ConfirmScreen #confirm-question {
        height: auto;
        margin: 1 0;
    }
    ConfirmScreen #confirm-buttons {
        height: auto;
        align-horizontal: right;
    }
    ConfirmScreen Button {
        margin-left: 2;
        min-width: 8;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm-yes"),
        Binding("n,escape,q", "answer(False)", "No", id="confirm-no"),
        Binding("left,right", "toggle_focus", "Switch", show=False),
    ]

    def __init__(self, question: str, *, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        """The question as asked, for tests and for the log."""
        self.yes_label = yes

    def compose(self) -> ComposeResult:
        """The question above the two buttons; yes on the left, No (focused) on the right."""
        with Vertical(id="confirm-frame") as frame:
            frame.border_title = "Confirm"
            frame.border_subtitle = "y yes · n/esc no"
            yield Static(self.question, id="confirm-question", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(self.yes_label, id="yes", variant="warning")
                yield Button("No", id="no", variant="primary")

    def on_mount(self) -> None:
        """Focus No: Enter confirms only once the operator moved to the yes button."""
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A button (Enter on the focused one, or a click) answers the question."""
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """`y` or `n`/Escape."""
        self.dismiss(yes)

    def action_toggle_focus(self) -> None:
        """Arrow keys move between the two buttons."""
        yes, no = self.query_one("#yes", Button), self.query_one("#no", Button)
        (no if yes.has_focus else yes).focus()
