"""The Stripe account and API base the billing handler talks to, and the SDK client.

The API key lives only in a `repr=False` field and is shown masked (`sk_test_…(masked)`);
messages built from Stripe's replies go through `StripeSettings.redact`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from taskboard.core.base.errors import ConfigError

if TYPE_CHECKING:
    from stripe import StripeClient

STRIPE_API_BASE = "https://api.stripe.com"
# The local endpoint accepts any key; a test-mode-looking one keeps the SDK happy and makes
# clear in any log that no real account is involved.
LOCAL_STRIPE_KEY = "sk_test_taskboard_local"
DEFAULT_STRIPE_TIMEOUT = 30.0
_STRIPE_KEY = re.compile(r"(sk|rk)_(test|live)_[A-Za-z0-9_]+")
_ANY_STRIPE_KEY = re.compile(r"\b(?:sk|rk)_(?:test|live)_[A-Za-z0-9_*]+")


@dataclass(frozen=True)
class StripeSettings:
    """The Stripe account (API key) and API base the billing handler talks to.

    `api_base` None means Stripe itself. With no key but an `api_base`, the local endpoint
    is assumed and `LOCAL_STRIPE_KEY` is sent.
    """

    api_key: str | None = field(default=None, repr=False)
    api_base: str | None = None
    timeout: float = DEFAULT_STRIPE_TIMEOUT

    @property
    def configured(self) -> bool:
        """Whether billing jobs have anywhere to go."""
        return self.api_key is not None or self.api_base is not None

    @property
    def effective_key(self) -> str | None:
        """The key the SDK sends: the real one, the local placeholder, or None."""
        if self.api_key is not None:
            return self.api_key
        return LOCAL_STRIPE_KEY if self.api_base is not None else None

    def describe(self) -> str:
        """The target with the key masked, e.g. `stripe: sk_test_…(masked) → api.stripe.com`."""
        if not self.configured:
            return "stripe: not configured"
        if self.api_key is None:
            return f"stripe: local endpoint {self.api_base}"
        where = self.api_base or STRIPE_API_BASE
        return f"stripe: {mask_stripe_key(self.api_key)} → {where.removeprefix('https://')}"

    def redact(self, text: str) -> str:
        """`text` with the API key, and anything shaped like a key, masked.

        For messages built from Stripe's replies: a 401 names the key it was given.
        """
        return _ANY_STRIPE_KEY.sub(
            lambda m: mask_stripe_key(m.group(0)), redact(text, self.api_key)
        )


def parse_stripe_base(url: str, *, has_real_key: bool) -> str:
    """Check `TASKBOARD_STRIPE_API_BASE` and return it without a trailing slash."""
    name = "TASKBOARD_STRIPE_API_BASE"
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        raise ConfigError(f"{name} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http:// or https:// URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(f"{name} must not carry credentials, a query or a fragment")
    if parts.path not in ("", "/"):
        raise ConfigError(f"{name} must not have a path (the SDK adds /v1/...)")
    # A real key sent in clear text to another host could be read on the way.
    if has_real_key and parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ConfigError(f"{name} must use https:// when STRIPE_API_KEY is set")
    return url.rstrip("/")


def mask_stripe_key(key: str) -> str:
    """`sk_test_…(masked)`: the key's kind and mode stay visible, the secret part does not."""
    match = re.match(r"^((?:sk|rk|pk)_(?:test|live)_)", key)
    return f"{match.group(1) if match else ''}…(masked)"


def redact(text: str, *secrets: str | None) -> str:
    """Replace every occurrence of each non-empty secret in `text` with `***`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


@asynccontextmanager
async def open_stripe_client(settings: StripeSettings) -> AsyncIterator[StripeClient]:
    """A `StripeClient` on the async aiohttp transport, closed on exit.

    A client per use, because an aiohttp session belongs to the event loop that made it and
    workers may run in different loops. The SDK's own retries are off: the worker retries
    with backoff, and SDK sleeps would hold the job's connection for nothing.
    """
    import stripe  # heavy (~0.5 s); only billing needs it

    key = settings.effective_key
    if key is None:
        raise ConfigError(
            "Stripe is not configured: set STRIPE_API_KEY or TASKBOARD_STRIPE_API_BASE"
        )
    http_client = stripe.AIOHTTPClient(timeout=settings.timeout)
    client = stripe.StripeClient(
        key,
        base_addresses={"api": settings.api_base or STRIPE_API_BASE},
        http_client=http_client,
        max_network_retries=0,
    )
    try:
        yield client
    finally:
        await http_client.close_async()  # type: ignore[no-untyped-call]  # untyped in the SDK


def check_stripe_key(key: str) -> None:
    if key.startswith("pk_"):
        raise ConfigError(
            "STRIPE_API_KEY is a publishable key (pk_…); use a secret or restricted key"
        )
    if not _STRIPE_KEY.fullmatch(key):
        raise ConfigError("STRIPE_API_KEY does not look like a Stripe key (sk_… or rk_…)")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
