"""`Idempotency-Key` as Stripe documents it for API v1.

Once a request with a key has begun executing, its status and body are saved and every later
request with the same key and the same parameters gets that first response again; the same
key with different parameters (or another path) is a 400 `idempotency_error`, and a request
whose key is still in flight gets a 409. Requests refused before executing save nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from taskboard.core.standins.stripe_api import error_body

# method, path and the sorted form parameters: what "the same request" means.
Fingerprint = tuple[str, str, tuple[tuple[str, str], ...]]


@dataclass
class Saved:
    """What a key is bound to; `status` None while the first request runs."""

    fingerprint: Fingerprint
    status: int | None = None
    body: str = ""
    payment_intent: str | None = None


class IdempotencyKeys:
    """The keys seen so far, and how many replays each PaymentIntent was answered with.

    Used only on the endpoint's event loop, except `replays()`, which other threads call.
    """

    def __init__(self) -> None:
        self._saved: dict[str, Saved] = {}
        self._lock = threading.Lock()
        self._replays: Counter[str] = Counter()

    def clear(self) -> None:
        """Forget every key and replay count."""
        self._saved.clear()
        with self._lock:
            self._replays.clear()

    def replays(self) -> dict[str, int]:
        """Replays served per PaymentIntent."""
        with self._lock:
            return dict(self._replays)

    def claim(self, key: str, fingerprint: Fingerprint) -> Saved | None:
        """Bind `key` to a request about to execute (None), or return what it is bound to.

        Synchronous on purpose: with no await between the lookup and the insert, a
        concurrent request with the same key finds it in flight.
        """
        saved = self._saved.get(key)
        if saved is None:
            self._saved[key] = Saved(fingerprint)
        return saved

    def settle(self, key: str, status: int, body: str, payment_intent: str | None) -> None:
        """Save the first response under `key`: later requests get it again."""
        record = self._saved[key]
        record.status, record.body, record.payment_intent = status, body, payment_intent

    def release(self, key: str) -> None:
        """The request was refused before executing: the key is free again."""
        self._saved.pop(key, None)

    def answer(self, key: str, saved: Saved, fingerprint: Fingerprint) -> tuple[int, str, bool]:
        """Status, body and whether it is a replay, for a request whose key was bound."""
        if saved.fingerprint != fingerprint:
            return (
                400,
                error_body(
                    "idempotency_error",
                    f"Keys for idempotent requests can only be used with the same parameters "
                    f"they were first used with. Try using a key other than '{key}' if you "
                    f"meant to execute a different request.",
                ),
                False,
            )
        if saved.status is None:
            return (
                409,
                error_body(
                    "idempotency_error",
                    "There is currently another in-progress request using this Idempotent Key "
                    "(that probably means you submitted twice, and the other request is still "
                    "going through). Please try again later.",
                    code="idempotency_key_in_use",
                ),
                False,
            )
        if saved.payment_intent is not None:
            with self._lock:
                self._replays[saved.payment_intent] += 1
        return saved.status, saved.body, True
