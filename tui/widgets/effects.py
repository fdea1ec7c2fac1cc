"""The external effects panel: what the SMTP sink and the Stripe endpoint actually saw."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.board import BoardSnapshot, ChargeSeen, EmailSeen
from taskboard.tui.format import Colours, short
from textual.widgets import Static

SHOWN = 3
"""Duplicate emails and replayed charges listed by name; the rest are only counted."""

_ZERO_DECIMAL = frozenset(
    {
        "bif",
        "clp",
        "djf",
        "gnf",
        "jpy",
        "kmf",
        "krw",
        "mga",
        "pyg",
        "rwf",
        "ugx",
        "vnd",
        "vuv",
        "xaf",
        "xof",
        "xpf",
    }
)


class EffectsPanel(Static, can_focus=True):
    """Emails received (duplicates flagged) and charges (replays counted), each with whose
    they are: this process's own SMTP sink and Stripe endpoint, a shared one, or none.

    This is the panel where the fence's boundary shows: a duplicate Message-ID is a send
    that the database could not retract, while a replayed charge is Stripe honouring the
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
        _emails(text, effects.emails, colours)
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


def _emails(text: Text, emails: tuple[EmailSeen, ...], colours: Colours) -> None:
    duplicates = [e for e in emails if e.count > 1]
    text.append("Emails ", "bold")
    text.append(f"{sum(e.count for e in emails)} received · ")
    if not duplicates:
        text.append("no duplicates", colours.muted)
        return
    text.append(f"{len(duplicates)} DUPLICATE", f"bold {colours.warn}")
    for email in duplicates[:SHOWN]:
        text.append(f"\n  {email.count}x ", f"bold {colours.warn}")
        text.append(short(email.message_id, 30))
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
        text.append(f"{job} {_money(charge.amount, charge.currency)}")
    if len(replayed) > SHOWN:
        text.append(f"\n  and {len(replayed) - SHOWN} more", colours.muted)
    text.append("\n  a replay is not a second charge", colours.good)


def _scope(scope: str) -> str:
    # Scopes are phrases from core: "this process's SMTP sink (...)" or "not counted: ...".
    # The parenthesis gets a line of its own, indented, rather than wrap at the panel's edge.
    phrase = scope if scope.startswith("not ") else f"seen by {scope}"
    return phrase.replace(" (", "\n  (", 1)


def _money(amount: int, currency: str) -> str:
    # Stripe amounts are in the currency's minor unit, except for zero-decimal currencies.
    code = currency.lower()
    if code in _ZERO_DECIMAL:
        return f"{amount} {code.upper()}"
    return f"{amount / 100:.2f} {code.upper()}"
