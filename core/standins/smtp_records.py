"""What the SMTP sink keeps: each accepted message, and a tally per `Message-ID`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.parser import BytesHeaderParser
from email.policy import default as default_policy

from aiosmtpd.smtp import Envelope
from taskboard.core.standins.stamps import AttemptStamp, read_stamp


@dataclass(frozen=True)
class ReceivedMessage:
    """One message the sink accepted.

    `started_at` is when its SMTP transaction began (MAIL FROM arrived), `received_at` when
    the sink accepted it (end of DATA): a send that started before the attempt's deadline
    may still end after it. `started_at` is None only in records built by hand.
    """

    received_at: datetime
    mail_from: str
    recipients: tuple[str, ...]
    subject: str
    message_id: str | None
    headers: tuple[tuple[str, str], ...]
    size: int
    started_at: datetime | None = None

    def header(self, name: str) -> str | None:
        """The first header called `name` (case-insensitive), or None."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)

    @property
    def stamp(self) -> AttemptStamp:
        """The job, attempt and local deadline the sender put in `X-Taskboard-*` headers."""
        return read_stamp(self.header)


@dataclass(frozen=True)
class MessageTally:
    """The messages that share one `Message-ID`: more than one is a duplicate send."""

    at: datetime  # the latest receipt
    message_id: str  # "" for messages without one (each is then tallied alone)
    recipient: str
    subject: str
    count: int


def record_message(envelope: Envelope, started_at: datetime | None) -> ReceivedMessage:
    """The record of a message accepted at the end of DATA, now."""
    raw = envelope.original_content or b""
    parsed = BytesHeaderParser(policy=default_policy).parsebytes(raw)
    message_id = parsed.get("Message-ID")
    return ReceivedMessage(
        received_at=datetime.now(UTC),
        mail_from=envelope.mail_from or "",
        recipients=tuple(envelope.rcpt_tos),
        subject=str(parsed.get("Subject", "")),
        message_id=str(message_id).strip() if message_id else None,
        headers=tuple((key, str(value)) for key, value in parsed.items()),
        size=len(raw),
        started_at=started_at,
    )


def tally_by_message_id(messages: Iterable[ReceivedMessage]) -> tuple[MessageTally, ...]:
    """One tally per `Message-ID`, the latest receipt first."""
    latest: dict[object, ReceivedMessage] = {}
    counts: Counter[object] = Counter()
    for index, message in enumerate(messages):
        key: object = message.message_id or index  # no Message-ID: count it alone
        latest[key] = message
        counts[key] += 1
    rows = [
        MessageTally(
            at=m.received_at,
            message_id=m.message_id or "",
            recipient=", ".join(m.recipients),
            subject=m.subject,
            count=counts[key],
        )
        for key, m in latest.items()
    ]
    rows.sort(key=lambda row: row.at, reverse=True)
    return tuple(rows)
