"""One job in full: its row, every attempt with its whole error, and its external effects.

The story of a job is in its attempts: who claimed it, with which token, when each claim
ended or was taken over, and what the handler said. Errors are shown whole and wrapped,
never cut, because the end of an error is often the part that explains it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.json import JSON
from rich.table import Table
from rich.text import Text
from taskboard.core.board import AttemptRow, ChargeRecord, EmailCopy, JobDetail, money
from taskboard.core.control import BoardControl
from taskboard.tui.format import FAILURE_LABELS, Colours
from taskboard.tui.screens.confirm import ConfirmScreen
from taskboard.tui.screens.reading import (
    ReadingLine,
    answer,
    outcome_style,
    seconds,
    stamp,
    state_style,
)
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

RETRYABLE = frozenset({"dead", "cancelled"})
"""States `retry` accepts (core refuses the others; asking first would waste a question)."""

CANCELLABLE = frozenset({"pending", "scheduled", "running"})
"""States `cancel_job` accepts."""

# Stripe amounts are in the currency's minor unit, except for these zero-decimal currencies.


def short_token(token: str) -> str:
    """First 8 hex digits, as the claims table shows them."""
    return token.replace("-", "")[:8]


def _outcome_word(outcome: str | None) -> str:
    if outcome is None:
        return "running"
    return FAILURE_LABELS.get(outcome, outcome.replace("_", " "))


class AttemptCard(Static, can_focus=True):
    """One attempt: ordinal, worker, token, times, outcome, durations and the full error.

    Focusable: the focused card is the selected attempt, whose token `t` copies.
    """

    DEFAULT_CSS = """
    AttemptCard {
        height: auto;
        padding: 0 1;
        margin-bottom: 1;
        border-left: tall $foreground 20%;
    }
    AttemptCard:focus {
        border-left: tall $primary;
        background: $boost;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Previous attempt", show=False),
        Binding("down,j", "move(1)", "Next attempt", show=False),
    ]

    def __init__(
        self,
        attempt: AttemptRow,
        colours: Colours,
        *,
        before: AttemptRow | None = None,
        after: AttemptRow | None = None,
    ) -> None:
        super().__init__(self.describe(attempt, colours, before=before, after=after),
                         markup=False)
        self.attempt = attempt
        """The attempt shown."""

    @staticmethod
    def describe(
        attempt: AttemptRow,
        colours: Colours,
        *,
        before: AttemptRow | None = None,
        after: AttemptRow | None = None,
    ) -> Text:
        """The card's text: a heading line, the times, the durations, the whole error.
        `before` and `after` are the job's neighbouring claims, to name who reclaimed the
        job from whom."""
        text = Text.assemble(
            (f"#{attempt.ordinal}", "bold"),
            "  ",
            (attempt.worker, "bold"),
            "  token ",
            (short_token(attempt.token), f"bold {colours.info}"),
            "  ",
            (_outcome_word(attempt.outcome), outcome_style(attempt.outcome, colours)),
        )
        if before is not None and before.superseded_at is not None:
            text.append(f"  reclaimed from {before.worker}", colours.warn)
        # In the order they happened: a late worker's end after the reclaim is the story.
        moments: list[tuple[str, datetime | None, str, str]] = [
            ("claimed", attempt.claimed_at, "", "")
        ]
        if attempt.renewal_failed_at is not None:
            moments.append(("renewal failed", attempt.renewal_failed_at, colours.warn, ""))
        if attempt.superseded_at is not None:
            by = f" by {after.worker} (#{after.ordinal})" if after is not None else ""
            moments.append(("reclaimed", attempt.superseded_at, colours.warn, by))
        if attempt.ended_at is not None:
            moments.append(("ended", attempt.ended_at, "", ""))
        moments.sort(key=lambda moment: moment[1] or attempt.claimed_at)
        if attempt.ended_at is None:
            moments.append(("ended", None, colours.muted, ""))
        # Two moments fit one line at 80 columns; a lost lease's timeline gets a line per
        # moment, so no label is wrapped away from its time.
        together = len(moments) <= 2
        for at, (label, moment, style, suffix) in enumerate(moments):
            text.append(" · " if together and at else "\n")
            text.append(label if together else f"{label:<15}")
            text.append(" " if together else "")
            text.append(stamp(moment, millis=True), style)
            text.append(suffix)
        text.append(
            f"\npickup {seconds(attempt.pickup_seconds)}"
            f" · handler {seconds(attempt.handler_seconds)}"
            f" · least margin {seconds(attempt.min_margin_seconds)}",
            colours.muted,
        )
        if attempt.error:
            text.append("\nerror: ", f"bold {colours.bad}")
            text.append(attempt.error)
        return text

    def action_move(self, step: int) -> None:
        """Select the previous or next attempt."""
        cards = list(self.screen.query(AttemptCard))
        at = cards.index(self) + step
        if 0 <= at < len(cards):
            cards[at].focus()


class JobDetailScreen(Screen[None]):
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
        super().__init__()
        self.control = control
        self.job_id = job_id
        """The job shown."""
        self.detail: JobDetail | None = None
        """The latest answer of `control.job_detail`, or None before the first."""
        self.refusal: str | None = None
        """Why the last read or command failed, one line; None after a success."""
        self._reading = False
        self._selected: int | None = None
        self._colours = Colours()

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
    def reading(self) -> bool:
        """True while a read of the job is in flight."""
        return self._reading

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

    def action_reload(self) -> None:
        """Read the job again (one read at a time; a second press while waiting says so)."""
        line = self.query_one(ReadingLine)
        if self._reading:
            self.notify(f"Still waiting for the database (reading job #{self.job_id}).")
            return
        self._reading = True
        line.waiting(f"Reading job #{self.job_id}")
        self.run_worker(self._read(), group="read", exit_on_error=False)

    async def _read(self) -> None:
        try:
            detail, refusal = await answer(lambda: self.control.job_detail(self.job_id))
        finally:
            self._reading = False
        self.refusal = refusal
        line = self.query_one(ReadingLine)
        if detail is None:
            line.refused(f"Job #{self.job_id}", refusal or "no answer")
            return
        await self._show(detail)

    async def _show(self, detail: JobDetail) -> None:
        first = self.detail is None
        self.detail = detail
        colours = self._colours
        self.query_one(ReadingLine).status(self._heading(detail))
        self.query_one("#summary", Static).update(self._summary(detail))
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
        self.query_one("#effects", Static).update(self._effects(detail))
        self.query_one("#payload", Static).update(
            JSON(json.dumps(detail.payload, indent=2, ensure_ascii=False, default=str))
        )
        selected = self.selected_attempt
        if refocus and selected is not None:
            for card in cards:
                if card.attempt.ordinal == selected.ordinal:
                    card.focus(scroll_visible=False)

    def _heading(self, detail: JobDetail) -> Text:
        return Text.assemble(
            (f"Job #{detail.id}", "bold"),
            f" · {detail.kind} on {detail.queue} · ",
            (detail.state, state_style(detail.state, self._colours)),
            f" · attempts {_attempts(detail)}",
        )

    def _summary(self, detail: JobDetail) -> RenderableType:
        colours = self._colours
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style=colours.muted, no_wrap=True)
        grid.add_column()
        grid.add_column(style=colours.muted, no_wrap=True)
        grid.add_column()
        lease = (
            f"{detail.holder} until {stamp(detail.lease_expires_at, millis=True)}"
            if detail.holder
            else "—"
        )
        timeout = _timeout(detail)
        grid.add_row(
            "state", Text(detail.state, state_style(detail.state, colours)),
            "kind", f"{detail.kind} on queue {detail.queue}",
        )
        grid.add_row(
            "attempts", _attempts(detail),
            "timeout", timeout,
        )
        grid.add_row(
            "run at", stamp(detail.run_at, date=True),
            "created", stamp(detail.created_at, date=True),
        )
        grid.add_row(
            "finished", stamp(detail.finished_at, date=True),
            "unique key", detail.unique_key or "—",
        )
        grid.add_row("holder", lease, "trace", detail.trace_id or "—")
        latest = detail.attempts[-1].error if detail.attempts else None
        if not detail.last_error or detail.last_error == latest:
            return grid  # the latest attempt's card shows it whole already
        error = Text.assemble(("last error: ", f"bold {colours.bad}"), detail.last_error)
        return Group(grid, error)

    def _effects(self, detail: JobDetail) -> RenderableType:
        colours = self._colours
        parts: list[RenderableType] = []
        parts.append(_on_record(detail, colours))
        if detail.flow_lines:
            # Parents, steps (a refused checkpoint says so), result: only jobs that have them.
            flow = Text("\n".join(f"  {line}" for line in detail.flow_lines), overflow="fold")
            parts.append(Group(Text("Steps, parents, result", "bold"), flow))
        parts.append(_emails(detail.emails, colours))
        parts.append(_charges(detail.charges, colours))
        return Group(*parts)

    # ------------------------------------------------------------------ keys

    def action_back(self) -> None:
        """Back to the screen underneath."""
        self.dismiss()

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


def _on_record(detail: JobDetail, colours: Colours) -> RenderableType:
    """The effect records (every worker, any relay) with the job's fate; a job that did not
    complete but has an effect is flagged."""
    lines = detail.effects_on_record
    if not lines:
        return Text("On record: no charge, no send", colours.muted)
    title = Text("On record", "bold")
    if detail.state in ("cancelled", "dead"):
        title.append(f" · {detail.state.upper()} AFTER AN EFFECT: the outside world saw it",
                     f"bold {colours.bad}")
    body = Text("\n".join(f"  {line}" for line in lines), overflow="fold")
    return Group(title, body)


def _emails(emails: tuple[EmailCopy, ...], colours: Colours) -> RenderableType:
    if not emails:
        return Text("Emails: none seen", colours.muted)
    ids = {e.message_id for e in emails}
    title = Text.assemble(("Emails", "bold"), f" · {len(emails)} cop"
                          f"{'y' if len(emails) == 1 else 'ies'} of {len(ids)} message"
                          f"{'' if len(ids) == 1 else 's'}")
    if len(emails) > len(ids):
        title.append(" · the fence cannot retract a send", colours.warn)
    grid = Table.grid(padding=(0, 2))
    grid.add_column()
    grid.add_column(no_wrap=True)
    grid.add_column()
    for copy in emails:
        sender = (f"attempt #{copy.attempt}" if copy.attempt is not None else "no attempt header")
        if copy.worker:
            sender += f" · {copy.worker}"
        grid.add_row(Text(copy.message_id, overflow="fold"), stamp(copy.at, millis=True), sender)
    return Group(title, grid)


def _charges(charges: tuple[ChargeRecord, ...], colours: Colours) -> RenderableType:
    if not charges:
        return Text("Charges: none", colours.muted)
    grid = Table.grid(padding=(0, 2))
    grid.add_column()
    grid.add_column(no_wrap=True)
    grid.add_column()
    for charge in charges:
        if charge.replays is None:
            seen = Text("not seen by this dashboard's endpoint", colours.muted)
        else:
            seen = (
                Text(f"replayed {charge.replays}x", colours.good)
                if charge.replays
                else Text("no replays")
            )
            if charge.charged_at is not None:
                seen.append(f" · charged {stamp(charge.charged_at, millis=True)}")
        record = (
            Text("recorded", colours.good)
            if charge.recorded
            else Text("NO RECORD: money moved that no worker recorded", f"bold {colours.bad}")
        )
        grid.add_row(Text(charge.payment_intent, overflow="fold"),
                     money(charge.amount, charge.currency), Text.assemble(seen, " · ", record))
    return Group(Text("Charges", "bold"), grid)


def _attempts(detail: JobDetail) -> str:
    """"1 of 2 used" and, when the cards below are more (a snooze or a release gives its
    attempt back, a retry starts again at 0), how many claims they are."""
    used = f"{detail.attempts_used} of {detail.max_attempts} used"
    claims = len(detail.attempts)
    if claims == detail.attempts_used:
        return used
    return f"{used} · {claims} claim{'' if claims == 1 else 's'}"


def _timeout(detail: JobDetail) -> str:
    """The job's own timeout, else the kind's with its value, else none."""
    if detail.timeout_seconds:
        return f"{detail.timeout_seconds:g} s"
    if detail.kind_timeout_seconds:
        return f"{detail.kind_timeout_seconds:g} s (the kind's)"
    return "none"
