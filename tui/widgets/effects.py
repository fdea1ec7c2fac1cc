"""The external effects panel: what the SMTP sink and the Stripe endpoint actually saw."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot, ChargeSeen, EffectOfUncompleted, Effects, money
from taskboard.tui.format import Colours, short
from textual.widgets import Static

SHOWN = 3
"""Duplicate emails and replayed charges listed by name; the rest are only counted."""

class EffectsPanel(Static, can_focus=True):
    """Emails received (duplicates flagged) and charges (replays counted), each with whose
    they are: this process's own SMTP sink and Stripe endpoint, a shared one, or none; and
    jobs that were cancelled or went dead after an effect of theirs happened.

    This is the panel where the fence's boundary shows: a duplicate Message-ID is a send
    that the database could not retract (found by the send records, so with any relay, and
    by this process's sink), while a replayed charge is Stripe honouring the
    Idempotency-Key instead of charging twice. Focusable, so tab brings it into view on a
    small terminal where the panels stack.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "External effects"
        self._shown: tuple[object, ...] | None = None

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the effects of one snapshot; skip the repaint when nothing changed."""
        key = (snapshot.effects, colours)
        if key == self._shown:
            return
        self._shown = key
        effects = snapshot.effects
        text = Text()
        _uncompleted(text, effects.uncompleted, colours)
        _emails(text, effects, colours)
        if effects.email_scope:
            text.append(f"\n  {_scope(effects.email_scope)}", colours.muted)
        text.append("\n")
        _charges(text, effects.charges, colours)
        if effects.charge_scope:
            text.append(f"\n  {_scope(effects.charge_scope)}", colours.muted)
        # Where the effects went comes last: least needed when the panel is short.
        for target in (effects.smtp_target, effects.stripe_target):
            if target:
                text.append(f"\n{target}", colours.muted)
        self.update(text)


def _uncompleted(
    text: Text, jobs: tuple[EffectOfUncompleted, ...], colours: Colours
) -> None:
    # First: what needs an operator most (money moved or mail sent for a job that says it
    # did not happen); absent when there is none.
    if not jobs:
        return
    text.append(f"{len(jobs)} NOT COMPLETED with effects", f"bold {colours.bad}")
    for job in jobs[:SHOWN]:
        what = []
        if job.charges:
            what.append("charged" if job.charges == 1 else f"charged {job.charges}x")
        if job.sends:
            what.append(f"{job.sends} sent")
        text.append(f"\n  #{job.job_id} {short(job.kind, 12)} {job.state}: {', '.join(what)}")
    if len(jobs) > SHOWN:
        text.append(f"\n  and {len(jobs) - SHOWN} more", colours.muted)
    text.append("\n")


def _emails(text: Text, effects: Effects, colours: Colours) -> None:
    duplicates = effects.duplicates
    text.append("Emails ", "bold")
    received = sum(e.count for e in effects.emails)
    recorded = len(effects.sends)
    text.append(f"{received} received · " if effects.emails or not recorded else "")
    if recorded:
        text.append(f"{recorded} recorded · ")
    if not duplicates:
        text.append("no duplicates", colours.muted)
        return
    counts = {e.message_id: e.count for e in effects.emails}
    counts.update({s.message_id: max(s.attempts, counts.get(s.message_id, 0))
                   for s in effects.sends})
    text.append(f"{len(duplicates)} DUPLICATE", f"bold {colours.warn}")
    for message_id in duplicates[:SHOWN]:
        text.append(f"\n  {counts.get(message_id, 2)}x ", f"bold {colours.warn}")
        text.append(short(message_id, 30))
    if len(duplicates) > SHOWN:
        text.append(f"\n  and {len(duplicates) - SHOWN} more", colours.muted)
    text.append("\n  the fence cannot retract a send", colours.warn)


def _charges(text: Text, charges: tuple[ChargeSeen, ...], colours: Colours) -> None:
    replayed = [c for c in charges if c.replays]
    text.append("Charges ", "bold")
    text.append(f"{len(charges)} made · ")
    if not replayed:
        text.append("no replays", colours.muted)
        return
    text.append(f"{sum(c.replays for c in replayed)} REPLAYED", f"bold {colours.good}")
    for charge in replayed[:SHOWN]:
        job = f"job #{charge.job_id}" if charge.job_id is not None else "no job"
        text.append(f"\n  {charge.replays}x ", f"bold {colours.good}")
        text.append(f"{job} {money(charge.amount, charge.currency)}")
    if len(replayed) > SHOWN:
        text.append(f"\n  and {len(replayed) - SHOWN} more", colours.muted)
    text.append("\n  a replay is not a second charge", colours.good)


def _scope(scope: str) -> str:
    # Scopes are phrases from core: "this process's SMTP sink (...)" or "not counted: ...".
    # The parenthesis gets a line of its own, indented, rather than wrap at the panel's edge.
    phrase = scope if scope.startswith("not ") else f"seen by {scope}"
    return phrase.replace(" (", "\n  (", 1)
