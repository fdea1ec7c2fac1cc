"""Immutable rows of external effects for the dashboard and `history`: what the SMTP sink and
Stripe endpoint saw in this process, and what the database's effect records hold (every
relay, every worker). Re-exported by `taskboard.core.view.board`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# Stripe amounts are in the currency's minor unit, except for zero-decimal currencies.
_ZERO_DECIMAL = frozenset("bif clp djf gnf jpy kmf krw mga pyg rwf ugx vnd vuv xaf xof xpf".split())


def money(amount: int, currency: str) -> str:
    """`1999, "usd"` as `19.99 USD`; zero-decimal currencies as they are (`500 JPY`)."""
    code = currency.lower()
    if code in _ZERO_DECIMAL:
        return f"{amount} {code.upper()}"
    return f"{amount / 100:.2f} {code.upper()}"


@dataclass(frozen=True)
class EmailSeen:
    """A message the SMTP sink received."""

    at: datetime
    message_id: str
    recipient: str
    subject: str
    count: int  # how many messages with this Message-ID the sink holds


@dataclass(frozen=True)
class ChargeSeen:
    """A PaymentIntent the Stripe endpoint created or replayed."""

    at: datetime
    job_id: int | None
    payment_intent: str
    amount: int
    currency: str
    replays: int  # idempotent replays served for the same key


@dataclass(frozen=True)
class SendSeen:
    """A Message-ID in the send records (`taskboard_email_sends`), whatever relay took it."""

    at: datetime
    message_id: str
    recipient: str
    job_id: int
    attempts: int  # how many attempts sent it: more than one is a duplicate


@dataclass(frozen=True)
class EffectOfUncompleted:
    """A cancelled or dead job with an effect on record: the outside world saw it happen."""

    job_id: int
    kind: str
    state: str  # cancelled | dead
    finished_at: datetime
    charges: int  # succeeded charges on record
    sends: int  # copies on record


@dataclass(frozen=True)
class Effects:
    """External effects: seen by the embedded SMTP sink and Stripe endpoint, and recorded
    in the database (sends and flagged jobs, from every worker)."""

    emails: tuple[EmailSeen, ...] = ()
    charges: tuple[ChargeSeen, ...] = ()
    smtp_target: str = ""
    stripe_target: str = ""
    email_scope: str = ""  # whose messages `emails` counts (this process's sink, or none)
    charge_scope: str = ""  # whose charges `charges` counts (this process's, a shared one)
    sends: tuple[SendSeen, ...] = ()  # the latest send records, by Message-ID
    uncompleted: tuple[EffectOfUncompleted, ...] = ()

    @property
    def duplicates(self) -> tuple[str, ...]:
        """Message-IDs sent more than once, by the records (any relay) or by this process's
        sink: sends the fence could not retract."""
        ids = {s.message_id for s in self.sends if s.attempts > 1}
        ids |= {e.message_id for e in self.emails if e.count > 1}
        return tuple(sorted(ids))

    @property
    def duplicate_emails(self) -> int:
        """How many Message-IDs went out more than once (`duplicates`)."""
        return len(self.duplicates)


@dataclass(frozen=True)
class EmailCopy:
    """One copy of a job's email that reached the SMTP sink, and which claim sent it."""

    at: datetime
    message_id: str
    attempt: int | None  # the claim's ordinal, as its X-Taskboard-Attempt header says
    worker: str | None  # the worker of that claim, from the attempts history


@dataclass(frozen=True)
class SendRecord:
    """One copy of a job's email a relay accepted, as the sending worker recorded it."""

    at: datetime
    message_id: str
    recipient: str
    attempt: int  # the claim's ordinal
    worker: str


@dataclass(frozen=True)
class ChargeRecord:
    """A charge of a job: what the billing handler recorded, and what the endpoint saw."""

    payment_intent: str
    amount: int
    currency: str
    replays: int | None = None  # None: not seen by this process's Stripe endpoint
    recorded: bool = True  # in taskboard_billing_charges, whatever the attempt's fate
    charged_at: datetime | None = None  # when the endpoint moved the money, if it was seen
    attempt: int | None = None  # the claim that charged (None: recorded before migration 9)
    worker: str | None = None
    status: str = "succeeded"  # the PaymentIntent's status as Stripe answered


_FATE = {
    "completed": "then completed",
    "cancelled": "then cancelled",
    "dead": "then dead",
    "running": "job still running",
    "pending": "job pending again",
    "scheduled": "job scheduled again",
}


def effect_lines(
    state: str, charges: tuple[ChargeRecord, ...], sends: tuple[SendRecord, ...]
) -> list[str]:
    """What the outside world saw of a job in `state`, each with the job's fate: "charged
    19.99 USD (attempt 1, worker a), then cancelled: pi_...", "sent <id> to x@y, attempt 2
    by worker b, then completed". From the effect records, which outlive the attempts that
    made them; a Message-ID sent by more than one attempt is flagged."""
    fate = _FATE.get(state, state)
    lines = []
    for c in charges:
        if not c.recorded:
            continue
        who = "" if c.attempt is None else f" (attempt {c.attempt}, worker {c.worker})"
        amount = money(c.amount, c.currency)
        if c.status == "succeeded":
            lines.append(f"charged {amount}{who}, {fate}: {c.payment_intent}")
        else:
            lines.append(
                f"not charged: {c.payment_intent} for {amount} ended {c.status}{who}, {fate}"
            )
    attempts: dict[str, set[int]] = {}
    for m in sends:
        attempts.setdefault(m.message_id, set()).add(m.attempt)
        lines.append(
            f"sent {m.message_id} to {m.recipient}, attempt {m.attempt} by worker {m.worker}, "
            f"{fate}"
        )
    lines += [
        f"DUPLICATE: {mid} sent by {len(n)} attempts (the fence cannot retract a send)"
        for mid, n in attempts.items()
        if len(n) > 1
    ]
    return lines
