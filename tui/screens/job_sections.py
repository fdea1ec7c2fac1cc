"""The sections of a job's detail screen, as Rich renderables: the heading, the summary
grid, and the external effects (the records with the job's fate, its steps, parents and
result, the emails and charges this dashboard's stand-ins saw)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from taskboard.core.view.board import ChargeRecord, EmailCopy, JobDetail, money
from taskboard.tui.format import Colours
from taskboard.tui.screens.reading import stamp, state_style


def heading(detail: JobDetail, colours: Colours) -> Text:
    """The reading line's text: job, kind, queue, state, attempts."""
    return Text.assemble(
        (f"Job #{detail.id}", "bold"),
        f" · {detail.kind} on {detail.queue} · ",
        (detail.state, state_style(detail.state, colours)),
        f" · attempts {attempts_used(detail)}",
    )


def summary(detail: JobDetail, colours: Colours) -> RenderableType:
    """The job's row in a grid (state, kind, attempts, timeout, times, holder, trace), and
    its last error when no attempt card shows it."""
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
        "attempts", attempts_used(detail),
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
    if detail.state == "waiting" and detail.after:
        # What it waits on, where the eye lands first; the flow section lists it too.
        grid.add_row("waits on", Text(", ".join(detail.after), colours.warn), "", "")
    latest = detail.attempts[-1].error if detail.attempts else None
    if not detail.last_error or detail.last_error == latest:
        return grid  # the latest attempt's card shows it whole already
    error = Text.assemble(("last error: ", f"bold {colours.bad}"), detail.last_error)
    return Group(grid, error)


def effects(detail: JobDetail, colours: Colours) -> RenderableType:
    """What the outside world saw of the job and what its flow recorded."""
    parts: list[RenderableType] = []
    parts.append(_on_record(detail, colours))
    if detail.flow_lines:
        # Parents, steps (a refused checkpoint says so), result: only jobs that have them.
        parts.append(Group(Text("Steps, parents, result", "bold"), _flow(detail, colours)))
    if detail.actions:
        actions = Text("\n".join(f"  {stamp(a.at, date=True)}  {a.action}  {a.detail}"
                                  for a in detail.actions), overflow="fold")
        parts.append(Group(Text(f"Operator actions · {len(detail.actions)}", "bold"), actions))
    parts.append(_emails(detail.emails, colours))
    parts.append(_charges(detail.charges, colours))
    return Group(*parts)


def _flow(detail: JobDetail, colours: Colours) -> Text:
    """Core's lines (the words `history` uses), a refused checkpoint in red, and which
    steps ran twice: a step whose record the fence refused ran again on a later attempt,
    so its effect happened twice (the one step in flight is all a reclaim repeats)."""
    lines = detail.flow_lines
    first_step = 1 if detail.after else 0
    text = Text(overflow="fold")
    for at, line in enumerate(lines):
        step = at - first_step
        refused = 0 <= step < len(detail.steps) and detail.steps[step].outcome == "rejected"
        text.append(("\n" if at else "") + f"  {line}", f"bold {colours.bad}" if refused else "")
    recorded = {s.name for s in detail.steps if s.outcome == "recorded"}
    again = sorted({s.name for s in detail.steps if s.outcome == "rejected"} & recorded)
    if again:
        text.append(f"\n  ran again after its record was fenced out: {', '.join(again)} "
                    "(its effect happened more than once; recorded steps were replayed, "
                    "not run again)", colours.warn)
    return text



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



def attempts_used(detail: JobDetail) -> str:
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
