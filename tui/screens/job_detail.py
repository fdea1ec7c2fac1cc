"""One job in full: its row, every attempt with its whole error, and its external effects.

The screen reads the job through `control.job_detail`, lays out its sections
(`job_sections.py`) and one `AttemptCard` per claim (`attempt_card.py`), and offers the
job's commands (retry, cancel: each asks first) and copies of its id and tokens.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import ClassVar

from rich.json import JSON
from taskboard.core.view.board import AttemptRow, JobDetail
from taskboard.core.view.control import BoardControl
from taskboard.tui.format import Colours
from taskboard.tui.screens.attempt_card import AttemptCard
from taskboard.tui.screens.confirm import ConfirmScreen
from taskboard.tui.screens.job_sections import effects, heading, summary
from taskboard.tui.screens.read_screen import ReadScreen
from taskboard.tui.screens.reading import ReadingLine, answer
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Footer, Static

__all__ = ["CANCELLABLE", "RETRYABLE", "AttemptCard", "JobDetailScreen"]

RETRYABLE = frozenset({"dead", "cancelled"})
"""States `retry` accepts (core refuses the others; asking first would waste a question)."""

CANCELLABLE = frozenset({"pending", "scheduled", "running"})
"""States `cancel_job` accepts."""


class JobDetailScreen(ReadScreen[JobDetail]):
    """Everything about job `job_id`, read through `control.job_detail`.

    Keys: escape/q back, r retry (asks first), C cancel (asks first), c copy the job id,
    t copy the selected attempt's token, R/F5 reload, ↑↓ select an attempt.
    """

    DEFAULT_CSS = """
    JobDetailScreen #detail-body {
        height: 1fr;
        padding: 0 1;
    }
    JobDetailScreen .section {
        height: auto;
        margin-top: 1;
        text-style: bold;
        color: $accent;
    }
    JobDetailScreen #summary, JobDetailScreen #effects, JobDetailScreen #payload,
    JobDetailScreen #attempts {
        height: auto;
    }
    JobDetailScreen #attempts {
        margin-top: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "back", "Back", id="detail-back"),
        Binding("r", "retry", "Retry", id="detail-retry"),
        Binding("C", "cancel_job", "Cancel job", id="detail-cancel"),
        Binding("c", "copy_id", "Copy id", id="detail-copy-id"),
        Binding("t", "copy_token", "Copy token", id="detail-copy-token"),
        Binding("R,f5", "reload", "Reload", id="detail-reload"),
    ]

    def __init__(self, control: BoardControl, job_id: int) -> None:
        super().__init__(control)
        self.job_id = job_id
        """The job shown."""
        self.detail: JobDetail | None = None
        """The latest answer of `control.job_detail`, or None before the first."""
        self._selected: int | None = None

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        """The reading line, then the job in a scrolling body, then the footer."""
        yield ReadingLine(id="reading")
        with VerticalScroll(id="detail-body"):
            yield Static(id="summary")
            yield Static("Attempts", id="attempts-title", classes="section")
            yield Vertical(id="attempts")
            yield Static("External effects", id="effects-title", classes="section")
            yield Static(id="effects")
            yield Static("Payload (secrets masked)", id="payload-title", classes="section")
            yield Static(id="payload")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Resolve colours from the theme and read the job."""
        self._colours = Colours.from_theme(self.app.get_css_variables())
        self.title = f"Job #{self.job_id}"
        self.action_reload()

    @property
    def selected_attempt(self) -> AttemptRow | None:
        """The attempt whose token `t` copies: the focused card, else the latest attempt."""
        if self.detail is None or not self.detail.attempts:
            return None
        for attempt in self.detail.attempts:
            if attempt.ordinal == self._selected:
                return attempt
        return self.detail.attempts[-1]

    def on_descendant_focus(self, event: object) -> None:
        """Remember which attempt is selected, so a reload keeps it."""
        focused = self.focused
        if isinstance(focused, AttemptCard):
            self._selected = focused.attempt.ordinal

    # ------------------------------------------------------------------ reading

    @property
    def what(self) -> str:
        """What this screen reads."""
        return f"job #{self.job_id}"

    def read_call(self) -> Awaitable[JobDetail]:
        """`control.job_detail` of the job."""
        return self.control.job_detail(self.job_id)

    async def show_answer(self, value: JobDetail) -> None:
        """Show the job (a reload keeps the selected attempt)."""
        await self._show(value)

    async def _show(self, detail: JobDetail) -> None:
        first = self.detail is None
        self.detail = detail
        colours = self._colours
        self.query_one(ReadingLine).status(heading(detail, colours))
        self.query_one("#summary", Static).update(summary(detail, colours))
        self.query_one("#attempts-title", Static).update(
            f"Attempts · {len(detail.attempts)}"
            + ("  (↑↓ select · t copies the token)" if detail.attempts else "")
        )
        box = self.query_one("#attempts", Vertical)
        # The latest attempt is selected first; a reload keeps the selection, but never takes
        # the focus from elsewhere once the operator moved it.
        refocus = first or isinstance(self.focused, AttemptCard) or self.focused is None
        await box.remove_children()
        runs = detail.attempts
        cards = [
            AttemptCard(
                attempt,
                colours,
                before=runs[at - 1] if at > 0 else None,
                after=runs[at + 1] if at + 1 < len(runs) else None,
            )
            for at, attempt in enumerate(runs)
        ]
        if cards:
            await box.mount_all(cards)
        else:
            await box.mount(Static("never claimed yet", classes="muted"))
        self.query_one("#effects-title", Static).update(
            f"External effects · {detail.effects_scope or 'not seen by this dashboard'}"
        )
        self.query_one("#effects", Static).update(effects(detail, colours))
        self.query_one("#payload", Static).update(
            JSON(json.dumps(detail.payload, indent=2, ensure_ascii=False, default=str))
        )
        selected = self.selected_attempt
        if refocus and selected is not None:
            for card in cards:
                if card.attempt.ordinal == selected.ordinal:
                    card.focus(scroll_visible=False)

    # ------------------------------------------------------------------ keys

    def action_copy_id(self) -> None:
        """Copy the job id."""
        self.app.copy_to_clipboard(str(self.job_id))
        self.notify(f"copied job id {self.job_id}", markup=False)

    def action_copy_token(self) -> None:
        """Copy the whole lease token of the selected attempt."""
        attempt = self.selected_attempt
        if attempt is None:
            self.notify(f"Job #{self.job_id} has no attempts yet: no token to copy.",
                        severity="warning", markup=False)
            return
        self.app.copy_to_clipboard(attempt.token)
        self.notify(f"copied the token of attempt #{attempt.ordinal}: {attempt.token}",
                    markup=False)

    def action_retry(self) -> None:
        """Ask, then make the dead or cancelled job pending again."""
        detail = self.detail
        if detail is None:
            self.notify(f"Job #{self.job_id} is not read yet; nothing to retry.",
                        severity="warning", markup=False)
            return
        if detail.state not in RETRYABLE:
            self.notify(f"Job #{detail.id} is {detail.state}; only a dead or cancelled job "
                        "can be retried.", severity="warning", markup=False)
            return
        question = (f"Retry {detail.state} job #{detail.id} ({detail.kind} on {detail.queue})? "
                    "It becomes pending and runs again from the start.")
        if detail.kind == "billing" or detail.charges:
            question += " This is a billing job: running it again may charge the customer again."
        elif detail.kind == "email" or detail.emails:
            question += " This is an email job: running it again may send the email again."
        job_id = detail.id

        def answered(yes: bool | None) -> None:
            if yes:
                self._command(f"Retrying job #{job_id}", lambda: self.control.retry(job_id),
                              f"Job #{job_id} is pending again")

        self.app.push_screen(ConfirmScreen(question, yes=f"Retry job #{job_id}"), answered)

    def action_cancel_job(self) -> None:
        """Ask, then cancel the unfinished job."""
        detail = self.detail
        if detail is None:
            self.notify(f"Job #{self.job_id} is not read yet; nothing to cancel.",
                        severity="warning", markup=False)
            return
        if detail.state not in CANCELLABLE:
            self.notify(f"Job #{detail.id} is already {detail.state}; only an unfinished job "
                        "can be cancelled.", severity="warning", markup=False)
            return
        question = f"Cancel {detail.state} job #{detail.id} ({detail.kind} on {detail.queue})?"
        if detail.state == "running":
            question += (f" {detail.holder or 'Its worker'} stops it within a second; an email "
                         "or charge already sent stays sent.")
        job_id = detail.id

        def answered(yes: bool | None) -> None:
            if yes:
                self._command(f"Cancelling job #{job_id}",
                              lambda: self.control.cancel_job(job_id),
                              f"Job #{job_id} cancelled")

        self.app.push_screen(ConfirmScreen(question, yes=f"Cancel job #{job_id}"), answered)

    def _command(self, what: str, call: Callable[[], Awaitable[None]], done: str) -> None:
        self.query_one(ReadingLine).waiting(what)
        self.run_worker(self._run_command(what, call, done), group="commands",
                        exit_on_error=False)

    async def _run_command(
        self, what: str, call: Callable[[], Awaitable[None]], done: str
    ) -> None:
        _, refusal = await answer(call)
        if refusal is not None:
            self.refusal = refusal
            self.query_one(ReadingLine).refused(what, refusal)
            self.notify(refusal, severity="warning", markup=False)
            return
        self.notify(done, markup=False)
        if not self._reading:
            self.action_reload()
