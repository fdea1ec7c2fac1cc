"""External services the handlers use: SMTP settings, and the Stripe settings (whose own
module is `stripe_settings`), read from the environment.

Secrets (the SMTP password, the Stripe API key) live only in fields with `repr=False` and
are rendered by `describe()` helpers with the secret masked, so they never reach a repr, a
log line, an error message or the dashboard.

With nothing configured, the embedded `SmtpSink` and `StripeEndpoint` stand in for real
services: start them and fill the gaps with `Services.with_local_smtp` and
`Services.with_local_stripe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from taskboard.core.base.addresses import is_hostname, parse_address
from taskboard.core.base.errors import ConfigError
from taskboard.core.base.stripe_settings import (
    LOCAL_STRIPE_KEY,
    StripeSettings,
    check_stripe_key,
    mask_stripe_key,
    open_stripe_client,
    parse_stripe_base,
    redact,
)

TlsMode = Literal["none", "starttls", "implicit"]

DEFAULT_MESSAGE_ID_DOMAIN = "taskboard.local"
DEFAULT_MAIL_FROM = "Taskboard <taskboard@taskboard.local>"
DEFAULT_SMTP_TIMEOUT = 30.0

_SMTP_DEFAULT_PORTS: dict[TlsMode, int] = {"none": 25, "starttls": 587, "implicit": 465}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class SmtpSettings:
    """Where the email handler sends mail, and how it authenticates."""

    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsMode = "none"
    timeout: float = DEFAULT_SMTP_TIMEOUT

    def describe(self) -> str:
        """The target as a URL with the password masked, e.g. `smtp://maya:***@host:25`."""
        scheme = "smtps" if self.tls == "implicit" else "smtp"
        creds = ""
        if self.username is not None:
            creds = quote(self.username, safe="")
            if self.password is not None:
                creds += ":***"
            creds += "@"
        query = "?starttls=1" if self.tls == "starttls" else ""
        return f"{scheme}://{creds}{_url_host(self.host)}:{self.port}{query}"


@dataclass(frozen=True)
class Services:
    """What handlers need from the outside world, passed to them as `ctx.services`."""

    smtp: SmtpSettings | None = None
    stripe: StripeSettings = field(default_factory=StripeSettings)
    mail_from: str = DEFAULT_MAIL_FROM
    message_id_domain: str = DEFAULT_MESSAGE_ID_DOMAIN

    @property
    def smtp_target(self) -> str:
        """SMTP target for display, password masked."""
        return self.smtp.describe() if self.smtp else "smtp: not configured"

    @property
    def stripe_target(self) -> str:
        """Stripe target for display, key masked."""
        return self.stripe.describe()

    def describe(self) -> str:
        """Both targets on one line, secrets masked."""
        return f"{self.smtp_target} | {self.stripe_target}"

    def with_local_smtp(self, host: str, port: int) -> Services:
        """Send mail to a local sink unless real SMTP settings were given."""
        if self.smtp is not None:
            return self
        return replace(self, smtp=SmtpSettings(host=host, port=port, timeout=10.0))

    def with_local_stripe(self, base_url: str) -> Services:
        """Send billing calls to a local endpoint unless a Stripe key or base was given."""
        if self.stripe.configured:
            return self
        return replace(self, stripe=replace(self.stripe, api_base=base_url))


def services_from_env(env: Mapping[str, str]) -> Services:
    """Build `Services` from environment variables; raises `ConfigError` on a bad value.

    `TASKBOARD_SMTP_URL` (`smtp://user:pass@host:port`, `smtps://` for implicit TLS,
    `?starttls=1`, `?timeout=seconds`), `STRIPE_API_KEY`, `TASKBOARD_STRIPE_API_BASE`,
    `TASKBOARD_MAIL_FROM` (default sender) and `TASKBOARD_MESSAGE_ID_DOMAIN`.
    """
    smtp_url = env.get("TASKBOARD_SMTP_URL", "").strip()
    key = env.get("STRIPE_API_KEY", "").strip() or None
    if key is not None:
        check_stripe_key(key)
    base = env.get("TASKBOARD_STRIPE_API_BASE", "").strip() or None
    if base is not None:
        base = parse_stripe_base(base, has_real_key=key is not None)
    services = Services(
        smtp=parse_smtp_url(smtp_url) if smtp_url else None,
        stripe=StripeSettings(api_key=key, api_base=base),
    )
    mail_from = env.get("TASKBOARD_MAIL_FROM", "").strip()
    if mail_from:
        services = replace(services, mail_from=_check_mail_from(mail_from))
    domain = env.get("TASKBOARD_MESSAGE_ID_DOMAIN", "").strip()
    if domain:
        if not is_hostname(domain):
            raise ConfigError(
                "TASKBOARD_MESSAGE_ID_DOMAIN must be a host name like mail.example.com"
            )
        services = replace(services, message_id_domain=domain.lower())
    return services


def parse_smtp_url(url: str) -> SmtpSettings:
    """Parse `smtp[s]://[user[:password]@]host[:port][?starttls=1&timeout=s]`.

    Errors never quote the URL, because it may hold the password.
    """
    name = "TASKBOARD_SMTP_URL"
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise ConfigError(f"{name} must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigError(f"{name} is not a valid URL (check the port and brackets)") from None
    scheme = parts.scheme.lower()
    if scheme not in ("smtp", "smtps"):
        raise ConfigError(f"{name} must start with smtp:// or smtps://")
    host = parts.hostname
    if not host:
        raise ConfigError(f"{name} has no host name")
    if parts.path not in ("", "/") or parts.fragment:
        raise ConfigError(f"{name} must not have a path or fragment")
    tls: TlsMode = "implicit" if scheme == "smtps" else "none"
    timeout = DEFAULT_SMTP_TIMEOUT
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "starttls":
            if value.lower() in _TRUE:
                if tls == "implicit":
                    raise ConfigError(f"{name}: smtps:// already uses TLS; drop ?starttls")
                tls = "starttls"
            elif value.lower() not in _FALSE:
                raise ConfigError(f"{name}: starttls must be 1 or 0")
        elif key == "timeout":
            timeout = _positive_seconds(value, f"{name}: timeout")
        else:
            raise ConfigError(f"{name}: unknown option {key!r} (known: starttls, timeout)")
    if port is None:
        port = _SMTP_DEFAULT_PORTS[tls]
    if port == 0:
        raise ConfigError(f"{name}: port must be between 1 and 65535")
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None and not username:
        raise ConfigError(f"{name} has a password but no user name")
    return SmtpSettings(
        host=host,
        port=port,
        username=username or None,
        password=password,
        tls=tls,
        timeout=timeout,
    )


def _check_mail_from(value: str) -> str:
    try:
        return str(parse_address(value))
    except ValueError as exc:
        raise ConfigError(f"TASKBOARD_MAIL_FROM: {exc}") from None


def _positive_seconds(value: str, what: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"{what} must be a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise ConfigError(f"{what} must be between 0 and 3600 seconds")
    return seconds


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = [
    "LOCAL_STRIPE_KEY",
    "Services",
    "SmtpSettings",
    "StripeSettings",
    "TlsMode",
    "is_hostname",
    "mask_stripe_key",
    "open_stripe_client",
    "parse_smtp_url",
    "parse_stripe_base",
    "redact",
    "services_from_env",
]
