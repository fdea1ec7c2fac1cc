"""A local stand-in for the Stripe PaymentIntents API, for the real `stripe` SDK to talk to.

It honours `Idempotency-Key` the way Stripe documents it for API v1: once a request with a
key has begun executing, its status and body are saved and every later request with the same
key and the same parameters gets that first response again, marked `Idempotent-Replayed:
true`; the same key with different parameters (or another path) is a 400
`idempotency_error`, and a request whose key is still in flight gets a 409. Requests refused
before executing (rate limited, failed validation, an injected 500) save nothing, so a retry
runs for real.

One local simplification: a PaymentIntent confirmed without a payment method is charged to
the customer's "saved card" (`pm_card_visa`) where real Stripe would refuse it.
`pm_card_chargeDeclined` and `pm_card_chargeDeclinedInsufficientFunds` decline as in Stripe's
test mode.

Every charge made is listed by `charges()` and, for other processes, as JSON by
`GET /_taskboard/charges`.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp
from aiohttp import web
from taskboard.core.board import ChargeSeen

FaultKind = Literal["decline", "500", "429", "slow"]
_Execute = Callable[[dict[str, Any], str | None], tuple[int, dict[str, Any]]]
JOB_METADATA_KEY = "taskboard_job"
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


@dataclass(frozen=True)
class Charge:
    """A PaymentIntent the endpoint charged, with how often its requests were replayed."""

    payment_intent: str
    amount: int
    currency: str
    customer: str | None
    idempotency_key: str | None  # of the request that created the PaymentIntent
    confirm_key: str | None
    metadata: Mapping[str, str]
    created: datetime
    replays: int

    @property
    def job_id(self) -> int | None:
        """The Taskboard job that asked for the charge, from the metadata."""
        value = self.metadata.get(JOB_METADATA_KEY, "")
        return int(value) if value.isdigit() else None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the `/_taskboard/charges` format)."""
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
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Charge:
        """Inverse of `as_json`."""
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
        )


@dataclass(frozen=True)
class RequestSeen:
    """One API request as the endpoint answered it."""

    method: str
    path: str
    idempotency_key: str | None
    status: int
    replayed: bool


@dataclass(frozen=True)
class _Fault:
    kind: FaultKind
    decline_code: str
    seconds: float


@dataclass
class _Saved:
    """What an idempotency key is bound to; `status` None while the first request runs."""

    fingerprint: tuple[str, str, tuple[tuple[str, str], ...]]
    status: int | None = None
    body: str = ""
    payment_intent: str | None = None


@dataclass
class _Intent:
    data: dict[str, Any]
    create_key: str | None
    confirm_key: str | None = None
    charged_at: datetime | None = None
    metadata: dict[str, str] = field(default_factory=dict)


class _ApiError(Exception):
    """An error response; `saved` when Stripe would have begun executing the request."""

    def __init__(self, status: int, error: dict[str, Any], *, saved: bool) -> None:
        super().__init__(error.get("message", ""))
        self.status = status
        self.error = error
        self.saved = saved


class StripeEndpoint:
    """An aiohttp server on 127.0.0.1 (a free port by default) serving PaymentIntents.

    Use `async with StripeEndpoint() as stripe:` or `await start()` / `await stop()`; point
    the SDK at `base_url`. Runs in the event loop that calls `start()`; the reading methods
    may be called from other threads.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._bind = (host, port)
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._lock = threading.Lock()
        self._latency = 0.0
        self._faults: deque[_Fault] = deque()
        self._keys: dict[str, _Saved] = {}
        self._intents: dict[str, _Intent] = {}
        self._replays: Counter[str] = Counter()
        self._requests: deque[RequestSeen] = deque(maxlen=10_000)

    async def start(self) -> StripeEndpoint:
        """Start listening; returns self."""
        if self._runner is not None:
            return self
        app = web.Application()
        app.router.add_post("/v1/payment_intents", self._create)
        app.router.add_post("/v1/payment_intents/{id}/confirm", self._confirm)
        app.router.add_get("/v1/payment_intents/{id}", self._retrieve)
        app.router.add_get("/_taskboard/charges", self._charges_json)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, *self._bind)
        await site.start()
        self._runner = runner
        self._port = runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        """Stop listening."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> StripeEndpoint:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`, for `TASKBOARD_STRIPE_API_BASE` or the SDK."""
        return f"http://{self._bind[0]}:{self._port}"

    # -- fault injection ---------------------------------------------------------------

    def set_latency(self, seconds: float) -> None:
        """Delay every API request this long while its idempotency key is held."""
        if seconds < 0:
            raise ValueError("latency must not be negative")
        self._latency = seconds

    def inject(
        self,
        kind: FaultKind,
        times: int = 1,
        *,
        decline_code: str = "generic_decline",
        seconds: float = 2.0,
    ) -> None:
        """Make the next `times` requests fail or stall.

        `decline`: the next confirmation is declined (402 `card_error` with `decline_code`);
        the decline is saved under its key, as Stripe saves it. `500` and `429`: the next API
        request is refused before it executes, so nothing is saved. `slow`: the next request
        takes `seconds` longer, holding its key in flight.
        """
        if kind not in ("decline", "500", "429", "slow"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._faults.extend(_Fault(kind, decline_code, seconds) for _ in range(times))

    def clear(self) -> None:
        """Forget payment intents, keys, charges, pending faults and the request log."""
        with self._lock:
            self._faults.clear()
            self._keys.clear()
            self._intents.clear()
            self._replays.clear()
            self._requests.clear()

    # -- what happened -----------------------------------------------------------------

    def charges(self) -> tuple[Charge, ...]:
        """Charges made, oldest first."""
        with self._lock:
            return tuple(
                Charge(
                    payment_intent=pid,
                    amount=intent.data["amount"],
                    currency=intent.data["currency"],
                    customer=intent.data["customer"],
                    idempotency_key=intent.create_key,
                    confirm_key=intent.confirm_key,
                    metadata=dict(intent.metadata),
                    created=intent.charged_at,
                    replays=self._replays[pid],
                )
                for pid, intent in self._intents.items()
                if intent.charged_at is not None
            )

    def effects_charges(self) -> tuple[ChargeSeen, ...]:
        """Charges for the dashboard, the latest first."""
        rows = [
            ChargeSeen(
                at=c.created,
                job_id=c.job_id,
                payment_intent=c.payment_intent,
                amount=c.amount,
                currency=c.currency,
                replays=c.replays,
            )
            for c in self.charges()
        ]
        return tuple(reversed(rows))

    def requests(self) -> tuple[RequestSeen, ...]:
        """API requests answered so far, oldest first."""
        with self._lock:
            return tuple(self._requests)

    # -- HTTP side ---------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.Response:
        return await self._serve(request, lambda params, key: self._do_create(params, key))

    async def _confirm(self, request: web.Request) -> web.Response:
        pid = request.match_info["id"]
        return await self._serve(request, lambda params, key: self._do_confirm(pid, params, key))

    async def _retrieve(self, request: web.Request) -> web.Response:
        pid = request.match_info["id"]
        return await self._serve(request, lambda params, key: (200, self._intent(pid).data))

    async def _charges_json(self, request: web.Request) -> web.Response:
        data = [charge.as_json() for charge in self.charges()]
        return web.json_response({"object": "list", "data": data})

    async def _serve(self, request: web.Request, execute: _Execute) -> web.Response:
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return self._answer(
                request,
                None,
                401,
                _error_body("invalid_request_error", "You did not provide an API key."),
                replayed=False,
            )
        pairs = sorted((await request.post()).items() if request.method == "POST" else [])
        params = [(key, str(value)) for key, value in pairs]
        key = request.headers.get("Idempotency-Key") if request.method == "POST" else None
        fault = self._take_fault(("429", "500", "slow"))
        if fault is not None and fault.kind in _REFUSALS:
            return self._answer(request, key, *_REFUSALS[fault.kind], replayed=False)
        if key is not None:
            fingerprint = (request.method, request.path, tuple(params))
            saved = self._keys.get(key)
            if saved is not None:
                return self._replay(request, key, saved, fingerprint)
            # No await between the lookup and this insert: a concurrent request with the
            # same key finds it in flight.
            self._keys[key] = _Saved(fingerprint)
        try:
            delay = self._latency + (fault.seconds if fault is not None else 0.0)
            if delay:
                await asyncio.sleep(delay)
            status, body = execute(_unflatten(params), key)
            saved_response = True
        except _ApiError as exc:
            status, body, saved_response = exc.status, {"error": exc.error}, exc.saved
        except BaseException:
            if key is not None:
                self._keys.pop(key, None)
            raise
        text = json.dumps(body)
        if key is not None:
            if saved_response:
                record = self._keys[key]
                record.status, record.body = status, text
                record.payment_intent = _intent_id(body)
            else:
                del self._keys[key]
        return self._answer(request, key, status, text, replayed=False)

    def _replay(
        self,
        request: web.Request,
        key: str,
        saved: _Saved,
        fingerprint: tuple[str, str, tuple[tuple[str, str], ...]],
    ) -> web.Response:
        if saved.fingerprint != fingerprint:
            return self._answer(
                request,
                key,
                400,
                _error_body(
                    "idempotency_error",
                    f"Keys for idempotent requests can only be used with the same parameters "
                    f"they were first used with. Try using a key other than '{key}' if you "
                    f"meant to execute a different request.",
                ),
                replayed=False,
            )
        if saved.status is None:
            return self._answer(
                request,
                key,
                409,
                _error_body(
                    "idempotency_error",
                    "There is currently another in-progress request using this Idempotent Key "
                    "(that probably means you submitted twice, and the other request is still "
                    "going through). Please try again later.",
                    code="idempotency_key_in_use",
                ),
                replayed=False,
            )
        if saved.payment_intent is not None:
            with self._lock:
                self._replays[saved.payment_intent] += 1
        return self._answer(request, key, saved.status, saved.body, replayed=True)

    def _answer(
        self, request: web.Request, key: str | None, status: int, body: str, *, replayed: bool
    ) -> web.Response:
        headers = {"Request-Id": "req_" + _random_id(14)}
        if key is not None:
            headers["Idempotency-Key"] = key
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        with self._lock:
            self._requests.append(RequestSeen(request.method, request.path, key, status, replayed))
        return web.Response(
            status=status, text=body, content_type="application/json", headers=headers
        )

    def _take_fault(self, kinds: tuple[FaultKind, ...]) -> _Fault | None:
        with self._lock:
            for index, fault in enumerate(self._faults):
                if fault.kind in kinds:
                    del self._faults[index]
                    return fault
        return None

    # -- the API itself ----------------------------------------------------------------

    def _do_create(self, params: dict[str, Any], key: str | None) -> tuple[int, dict[str, Any]]:
        amount = params.get("amount", "")
        if not amount.isdigit() or not 0 < int(amount) <= MAX_AMOUNT:
            raise _invalid("amount", "Invalid positive integer")
        currency = params.get("currency", "")
        if not re.fullmatch(r"[a-zA-Z]{3}", currency):
            raise _invalid("currency", "Invalid currency")
        metadata = params.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise _invalid("metadata", "Invalid hash")
        pid = "pi_" + _random_id(24)
        method = params.get("payment_method")
        data: dict[str, Any] = {
            "id": pid,
            "object": "payment_intent",
            "amount": int(amount),
            "amount_capturable": 0,
            "amount_received": 0,
            "capture_method": "automatic",
            "client_secret": f"{pid}_secret_{_random_id(24)}",
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
        intent = _Intent(data=data, create_key=key, metadata=dict(metadata))
        with self._lock:
            self._intents[pid] = intent
        if params.get("confirm") == "true":
            return self._do_confirm(pid, params, key)
        return 200, data

    def _do_confirm(
        self, pid: str, params: dict[str, Any], key: str | None
    ) -> tuple[int, dict[str, Any]]:
        intent = self._intent(pid)
        data = intent.data
        if data["status"] not in _CONFIRMABLE:
            raise _ApiError(
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
        fault = self._take_fault(("decline",))
        decline = fault.decline_code if fault is not None else TEST_DECLINES.get(method)
        if decline is not None:
            error = {
                "type": "card_error",
                "code": "card_declined",
                "decline_code": decline,
                "message": _DECLINE_MESSAGES.get(decline, "Your card was declined."),
                "charge": "ch_" + _random_id(24),
                "doc_url": "https://stripe.com/docs/error-codes/card-declined",
            }
            data["status"] = "requires_payment_method"
            data["last_payment_error"] = error
            raise _ApiError(402, {**error, "payment_intent": data}, saved=True)
        data.update(
            status="succeeded",
            amount_received=data["amount"],
            latest_charge="ch_" + _random_id(24),
            last_payment_error=None,
        )
        with self._lock:
            intent.confirm_key = key
            intent.charged_at = datetime.now(UTC)
        return 200, data

    def _intent(self, pid: str) -> _Intent:
        intent = self._intents.get(pid)
        if intent is None:
            raise _ApiError(
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


async def fetch_charges(base_url: str) -> tuple[Charge, ...]:
    """Read the charges of an endpoint running in another process."""
    client_timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=client_timeout) as session,
        session.get(f"{base_url.rstrip('/')}/_taskboard/charges") as response,
    ):
        response.raise_for_status()
        payload = await response.json()
    return tuple(Charge.from_json(item) for item in payload["data"])


def _error_body(kind: str, message: str, *, code: str | None = None) -> str:
    error: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        error["code"] = code
    return json.dumps({"error": error})


# Injected failures that happen before the request begins executing: nothing is saved under
# the idempotency key, so a retry with the same key runs for real.
_REFUSALS = {
    "429": (
        429,
        _error_body("invalid_request_error", "Request rate limit exceeded.", code="rate_limit"),
    ),
    "500": (500, _error_body("api_error", "An unknown error occurred (injected).")),
}


def _invalid(param: str, message: str) -> _ApiError:
    # Validation fails before execution begins, so Stripe saves nothing under the key.
    return _ApiError(
        400,
        {
            "type": "invalid_request_error",
            "code": "parameter_invalid",
            "param": param,
            "message": f"{message}: {param}",
        },
        saved=False,
    )


def _intent_id(body: dict[str, Any]) -> str | None:
    obj = body.get("error", {}).get("payment_intent") if "error" in body else body
    return obj.get("id") if isinstance(obj, dict) else None


def _unflatten(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Stripe's form encoding (`metadata[job]=5`) back into nested dicts."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        parts = re.findall(r"[^\[\]]+", key) or [key]
        node = result
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _invalid(key, "Invalid hash")
            node = child
        node[parts[-1]] = value
    return result


def _random_id(length: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(length))
