"""A one-line question with a text answer: a job id for `g`, a queue name for `P`."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class PromptScreen(ModalScreen[str | None]):
    """Asks `question`; Enter dismisses with the answer (stripped), Escape with None.

    `check` may refuse an answer with a reason, shown under the field until it changes.
    """

    DEFAULT_CSS = """
    PromptScreen {
        align: center middle;
    }
    PromptScreen > #prompt-frame {
        width: 64;
        max-width: 100%;
        height: auto;
        padding: 0 1;
        border: thick $accent;
        background: $surface;
    }
    PromptScreen #prompt-question, PromptScreen #prompt-error {
        height: auto;
        margin: 1 0 0 0;
    }
    PromptScreen #prompt-error {
        color: $warning;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="prompt-cancel"),
    ]

    def __init__(
        self,
        question: str,
        *,
        value: str = "",
        placeholder: str = "",
        check: Callable[[str], str | None] | None = None,
    ) -> None:
        super().__init__()
        self.question = question
        """The question shown above the field."""
        self._value = value
        self._placeholder = placeholder
        self._check = check

    def compose(self) -> ComposeResult:
        """Question, field, and a line for why an answer was refused."""
        with Vertical(id="prompt-frame"):
            yield Static(self.question, id="prompt-question", markup=False)
            yield Input(self._value, placeholder=self._placeholder, id="prompt-input")
            yield Static("", id="prompt-error", markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Dismiss with the answer, unless `check` refuses it."""
        answer = event.value.strip()
        reason = self._check(answer) if self._check is not None else None
        if reason:
            self.query_one("#prompt-error", Static).update(reason)
            return
        self.dismiss(answer)

    def on_input_changed(self, _event: Input.Changed) -> None:
        """A changed answer clears the last refusal."""
        self.query_one("#prompt-error", Static).update("")

    def action_cancel(self) -> None:
        """Dismiss without an answer."""
        self.dismiss(None)
