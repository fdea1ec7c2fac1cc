"""A local stand-in for the Stripe PaymentIntents API, for the real `stripe` SDK to talk to.

It honours `Idempotency-Key` the way Stripe documents it (see `stripe_idempotency`), serves
PaymentIntents (see `stripe_api`), and records every request with when it arrived and the
attempt its `X-Taskboard-*` headers name, and every charge with the request that moved the
money (see `stripe_records`). Faults can be injected: declines, refusals (500, 429) and
latency.

Every charge made is listed by `charges()` and, for other processes, as JSON by
`GET /_taskboard/charges` (read it with `fetch_charges`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp
from aiohttp import web
from taskboard.core.standins.stamps import read_stamp
from taskboard.core.standins.stripe_api import (
    Answer,
    ApiError,
    Arrival,
    PaymentIntents,
    error_body,
    intent_id,
    random_id,
    unflatten,
)
from taskboard.core.standins.stripe_idempotency import IdempotencyKeys
from taskboard.core.standins.stripe_records import JOB_METADATA_KEY, Charge, RequestSeen

FaultKind = Literal["decline", "500", "429", "slow"]
_Execute = Callable[[dict[str, Any], Arrival], Answer]


@dataclass(frozen=True)
class _Fault:
    kind: FaultKind
    decline_code: str
    seconds: float


# Injected failures that happen before the request begins executing: nothing is saved under
# the idempotency key, so a retry with the same key runs for real.
_REFUSALS = {
    "429": (
        429,
        error_body("invalid_request_error", "Request rate limit exceeded.", code="rate_limit"),
    ),
    "500": (500, error_body("api_error", "An unknown error occurred (injected).")),
}


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
        self._keys = IdempotencyKeys()
        self._intents = PaymentIntents(self._take_decline)
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
            self._requests.clear()
        self._keys.clear()
        self._intents.clear()

    # -- what happened -----------------------------------------------------------------

    def charges(self) -> tuple[Charge, ...]:
        """Charges made, oldest first."""
        return self._intents.charges(self._keys.replays())

    def requests(self) -> tuple[RequestSeen, ...]:
        """API requests answered so far, oldest first."""
        with self._lock:
            return tuple(self._requests)

    # -- HTTP side ---------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.Response:
        return await self._serve(request, self._intents.create)

    async def _confirm(self, request: web.Request) -> web.Response:
        pid = request.match_info["id"]
        return await self._serve(
            request, lambda params, came: self._intents.confirm(pid, params, came)
        )

    async def _retrieve(self, request: web.Request) -> web.Response:
        pid = request.match_info["id"]
        return await self._serve(request, lambda params, came: self._intents.retrieve(pid))

    async def _charges_json(self, request: web.Request) -> web.Response:
        data = [charge.as_json() for charge in self.charges()]
        return web.json_response({"object": "list", "data": data})

    async def _serve(self, request: web.Request, execute: _Execute) -> web.Response:
        key = request.headers.get("Idempotency-Key") if request.method == "POST" else None
        # Taken first, before any injected latency: the moment the call started is what an
        # audit compares with the attempt's deadline.
        came = Arrival(datetime.now(UTC), key, read_stamp(request.headers.get))
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            refusal = error_body("invalid_request_error", "You did not provide an API key.")
            return self._answer(request, came, 401, refusal, replayed=False)
        pairs = sorted((await request.post()).items() if request.method == "POST" else [])
        params = [(name, str(value)) for name, value in pairs]
        fault = self._take_fault(("429", "500", "slow"))
        if fault is not None and fault.kind in _REFUSALS:
            return self._answer(request, came, *_REFUSALS[fault.kind], replayed=False)
        if key is not None:
            fingerprint = (request.method, request.path, tuple(params))
            saved = self._keys.claim(key, fingerprint)
            if saved is not None:
                status, text, replayed = self._keys.answer(key, saved, fingerprint)
                return self._answer(request, came, status, text, replayed=replayed)
        try:
            delay = self._latency + (fault.seconds if fault is not None else 0.0)
            if delay:
                await asyncio.sleep(delay)
            status, body = execute(unflatten(params), came)
            keep = True
        except ApiError as exc:
            status, body, keep = exc.status, {"error": exc.error}, exc.saved
        except BaseException:
            if key is not None:
                self._keys.release(key)
            raise
        text = json.dumps(body)
        if key is not None:
            if keep:
                self._keys.settle(key, status, text, intent_id(body))
            else:
                self._keys.release(key)
        return self._answer(request, came, status, text, replayed=False)

    def _answer(
        self, request: web.Request, came: Arrival, status: int, body: str, *, replayed: bool
    ) -> web.Response:
        headers = {"Request-Id": "req_" + random_id(14)}
        if came.key is not None:
            headers["Idempotency-Key"] = came.key
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        seen = RequestSeen(
            method=request.method,
            path=request.path,
            idempotency_key=came.key,
            status=status,
            replayed=replayed,
            arrived_at=came.at,
            job=came.stamp.job,
            attempt=came.stamp.attempt,
            deadline=came.stamp.deadline,
        )
        with self._lock:
            self._requests.append(seen)
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

    def _take_decline(self) -> str | None:
        fault = self._take_fault(("decline",))
        return fault.decline_code if fault is not None else None


async def fetch_charges(base_url: str, *, timeout: float = 10.0) -> tuple[Charge, ...]:
    """Read the charges of an endpoint running in another process."""
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with (
        aiohttp.ClientSession(timeout=client_timeout) as session,
        session.get(f"{base_url.rstrip('/')}/_taskboard/charges") as response,
    ):
        response.raise_for_status()
        payload = await response.json()
    return tuple(Charge.from_json(item) for item in payload["data"])


__all__ = [
    "JOB_METADATA_KEY",
    "Charge",
    "FaultKind",
    "RequestSeen",
    "StripeEndpoint",
    "fetch_charges",
]
