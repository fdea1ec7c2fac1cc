"""The PaymentIntents API the local Stripe endpoint serves: its objects, rules and errors.

One local simplification: a PaymentIntent confirmed without a payment method is charged to
the customer's "saved card" (`pm_card_visa`) where real Stripe would refuse it.
`pm_card_chargeDeclined` and `pm_card_chargeDeclinedInsufficientFunds` decline as in Stripe's
test mode.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from taskboard.core.standins.stamps import AttemptStamp
from taskboard.core.standins.stripe_records import Charge

DEFAULT_CARD = "pm_card_visa"
MAX_AMOUNT = 99_999_999
TEST_DECLINES = {
    "pm_card_chargeDeclined": "generic_decline",
    "pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
}
_DECLINE_MESSAGES = {
    "insufficient_funds": "Your card has insufficient funds.",
    "lost_card": "Your card has been declined.",
    "stolen_card": "Your card has been declined.",
}
_CONFIRMABLE = {"requires_payment_method", "requires_confirmation"}

Answer = tuple[int, dict[str, Any]]


@dataclass(frozen=True)
class Arrival:
    """A request as it reached the endpoint: when, under which key, for which attempt."""

    at: datetime
    key: str | None
    stamp: AttemptStamp


class ApiError(Exception):
    """An error response; `saved` when Stripe would have begun executing the request."""

    def __init__(self, status: int, error: dict[str, Any], *, saved: bool) -> None:
        super().__init__(error.get("message", ""))
        self.status = status
        self.error = error
        self.saved = saved


@dataclass
class _Intent:
    data: dict[str, Any]
    create_key: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    confirmed_by: Arrival | None = None
    charged_at: datetime | None = None


class PaymentIntents:
    """The PaymentIntents the endpoint holds, and the create/confirm/retrieve rules.

    Changed on the endpoint's event loop; `charges()` may be read from other threads.
    `take_decline` answers, at each confirmation, whether an injected decline is due.
    """

    def __init__(self, take_decline: Callable[[], str | None]) -> None:
        self._take_decline = take_decline
        self._lock = threading.Lock()
        self._intents: dict[str, _Intent] = {}

    def clear(self) -> None:
        """Forget every PaymentIntent."""
        with self._lock:
            self._intents.clear()

    def charges(self, replays: Mapping[str, int]) -> tuple[Charge, ...]:
        """Charges made, oldest first, with the replays counted per PaymentIntent."""
        with self._lock:
            made = [(pid, i) for pid, i in self._intents.items() if i.charged_at is not None]
        return tuple(_charge(pid, intent, replays.get(pid, 0)) for pid, intent in made)

    def create(self, params: dict[str, Any], arrival: Arrival) -> Answer:
        """`POST /v1/payment_intents` (with `confirm=true`, confirmed at once)."""
        amount = params.get("amount", "")
        if not amount.isdigit() or not 0 < int(amount) <= MAX_AMOUNT:
            raise invalid("amount", "Invalid positive integer")
        currency = params.get("currency", "")
        if not re.fullmatch(r"[a-zA-Z]{3}", currency):
            raise invalid("currency", "Invalid currency")
        metadata = params.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise invalid("metadata", "Invalid hash")
        pid = "pi_" + random_id(24)
        method = params.get("payment_method")
        data: dict[str, Any] = {
            "id": pid,
            "object": "payment_intent",
            "amount": int(amount),
            "amount_capturable": 0,
            "amount_received": 0,
            "capture_method": "automatic",
            "client_secret": f"{pid}_secret_{random_id(24)}",
            "confirmation_method": "automatic",
            "created": int(time.time()),
            "currency": currency.lower(),
            "customer": params.get("customer"),
            "description": params.get("description"),
            "last_payment_error": None,
            "latest_charge": None,
            "livemode": False,
            "metadata": metadata,
            "payment_method": method,
            "payment_method_types": ["card"],
            "status": "requires_confirmation" if method else "requires_payment_method",
        }
        with self._lock:
            self._intents[pid] = _Intent(data, create_key=arrival.key, metadata=dict(metadata))
        if params.get("confirm") == "true":
            return self.confirm(pid, params, arrival)
        return 200, data

    def confirm(self, pid: str, params: dict[str, Any], arrival: Arrival) -> Answer:
        """`POST /v1/payment_intents/{id}/confirm`: the request that moves the money."""
        intent = self._intent(pid)
        data = intent.data
        if data["status"] not in _CONFIRMABLE:
            raise ApiError(
                400,
                {
                    "type": "invalid_request_error",
                    "code": "payment_intent_unexpected_state",
                    "message": f"This PaymentIntent's status is {data['status']}, "
                    "so it cannot be confirmed.",
                    "payment_intent": data,
                },
                saved=True,
            )
        method = params.get("payment_method") or data["payment_method"] or DEFAULT_CARD
        data["payment_method"] = method
        decline = self._take_decline()
        if decline is None:
            decline = TEST_DECLINES.get(method)
        if decline is not None:
            error = {
                "type": "card_error",
                "code": "card_declined",
                "decline_code": decline,
                "message": _DECLINE_MESSAGES.get(decline, "Your card was declined."),
                "charge": "ch_" + random_id(24),
                "doc_url": "https://stripe.com/docs/error-codes/card-declined",
            }
            data["status"] = "requires_payment_method"
            data["last_payment_error"] = error
            raise ApiError(402, {**error, "payment_intent": data}, saved=True)
        data.update(
            status="succeeded",
            amount_received=data["amount"],
            latest_charge="ch_" + random_id(24),
            last_payment_error=None,
        )
        with self._lock:
            intent.confirmed_by = arrival
            intent.charged_at = datetime.now(UTC)
        return 200, data

    def retrieve(self, pid: str) -> Answer:
        """`GET /v1/payment_intents/{id}`."""
        return 200, self._intent(pid).data

    def _intent(self, pid: str) -> _Intent:
        intent = self._intents.get(pid)
        if intent is None:
            raise ApiError(
                404,
                {
                    "type": "invalid_request_error",
                    "code": "resource_missing",
                    "param": "intent",
                    "message": f"No such payment_intent: '{pid}'",
                },
                saved=False,
            )
        return intent


def _charge(pid: str, intent: _Intent, replays: int) -> Charge:
    assert intent.charged_at is not None
    by = intent.confirmed_by
    return Charge(
        payment_intent=pid,
        amount=intent.data["amount"],
        currency=intent.data["currency"],
        customer=intent.data["customer"],
        idempotency_key=intent.create_key,
        confirm_key=by.key if by is not None else None,
        metadata=dict(intent.metadata),
        created=intent.charged_at,
        replays=replays,
        confirm_arrived_at=by.at if by is not None else None,
        confirm_attempt=by.stamp.attempt if by is not None else None,
        confirm_deadline=by.stamp.deadline if by is not None else None,
    )


def error_body(kind: str, message: str, *, code: str | None = None) -> str:
    """A Stripe error response body, as JSON text."""
    error: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        error["code"] = code
    return json.dumps({"error": error})


def invalid(param: str, message: str) -> ApiError:
    """A failed validation: it fails before execution begins, so nothing is saved."""
    return ApiError(
        400,
        {
            "type": "invalid_request_error",
            "code": "parameter_invalid",
            "param": param,
            "message": f"{message}: {param}",
        },
        saved=False,
    )


def intent_id(body: dict[str, Any]) -> str | None:
    """The PaymentIntent a response (or a card error) is about."""
    obj = body.get("error", {}).get("payment_intent") if "error" in body else body
    return obj.get("id") if isinstance(obj, dict) else None


def unflatten(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Stripe's form encoding (`metadata[job]=5`) back into nested dicts."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        parts = re.findall(r"[^\[\]]+", key) or [key]
        node = result
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise invalid(key, "Invalid hash")
            node = child
        node[parts[-1]] = value
    return result


def random_id(length: int) -> str:
    """Letters and digits, as in Stripe's object ids."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(length))
