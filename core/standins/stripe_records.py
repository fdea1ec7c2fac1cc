"""What the local Stripe endpoint keeps: the charges it made and the requests it answered."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from taskboard.core.standins.stamps import AttemptStamp

JOB_METADATA_KEY = "taskboard_job"


@dataclass(frozen=True)
class Charge:
    """A PaymentIntent the endpoint charged, with how often its requests were replayed.

    The `confirm_*` fields describe the request that moved the money (the one that executed
    the confirmation, not a replay of it): when it arrived, and the attempt and local
    deadline its `X-Taskboard-*` headers named. They are None in records built by hand or
    when the request carried no such header.
    """

    payment_intent: str
    amount: int
    currency: str
    customer: str | None
    idempotency_key: str | None  # of the request that created the PaymentIntent
    confirm_key: str | None
    metadata: Mapping[str, str]
    created: datetime  # when the money moved (the confirmation finished executing)
    replays: int
    confirm_arrived_at: datetime | None = None
    confirm_attempt: int | None = None
    confirm_deadline: float | None = None

    @property
    def job_id(self) -> int | None:
        """The Taskboard job that asked for the charge, from the metadata."""
        value = self.metadata.get(JOB_METADATA_KEY, "")
        return int(value) if value.isdigit() else None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the `/_taskboard/charges` format)."""
        arrived = self.confirm_arrived_at
        return {
            "payment_intent": self.payment_intent,
            "amount": self.amount,
            "currency": self.currency,
            "customer": self.customer,
            "idempotency_key": self.idempotency_key,
            "confirm_key": self.confirm_key,
            "metadata": dict(self.metadata),
            "job_id": self.job_id,
            "created": self.created.isoformat(),
            "replays": self.replays,
            "confirm_arrived_at": arrived.isoformat() if arrived is not None else None,
            "confirm_attempt": self.confirm_attempt,
            "confirm_deadline": self.confirm_deadline,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Charge:
        """Inverse of `as_json`; fields an older endpoint did not send are None."""
        arrived = data.get("confirm_arrived_at")
        attempt = data.get("confirm_attempt")
        deadline = data.get("confirm_deadline")
        return cls(
            payment_intent=data["payment_intent"],
            amount=int(data["amount"]),
            currency=data["currency"],
            customer=data.get("customer"),
            idempotency_key=data.get("idempotency_key"),
            confirm_key=data.get("confirm_key"),
            metadata=dict(data.get("metadata") or {}),
            created=datetime.fromisoformat(data["created"]),
            replays=int(data.get("replays", 0)),
            confirm_arrived_at=datetime.fromisoformat(arrived) if arrived else None,
            confirm_attempt=int(attempt) if attempt is not None else None,
            confirm_deadline=float(deadline) if deadline is not None else None,
        )


@dataclass(frozen=True)
class RequestSeen:
    """One API request as the endpoint answered it.

    `arrived_at` is when it reached the endpoint (before any injected latency); `job`,
    `attempt` and `deadline` are what its `X-Taskboard-*` headers said, None when absent.
    """

    method: str
    path: str
    idempotency_key: str | None
    status: int
    replayed: bool
    arrived_at: datetime
    job: int | None = None
    attempt: int | None = None
    deadline: float | None = None

    @property
    def at(self) -> datetime:
        """`arrived_at`: when the call started, as an audit compares it with `deadline`."""
        return self.arrived_at

    @property
    def stamp(self) -> AttemptStamp:
        """`job`, `attempt` and `deadline` together."""
        return AttemptStamp(self.job, self.attempt, self.deadline)
