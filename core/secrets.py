"""Keeping secrets off screens, out of logs and out of error messages.

Two tools. `mask_dsn` rewrites a connection string with its password masked, for showing
where Taskboard is connected. `scrub` removes every registered secret from any text, for
messages Taskboard does not write itself: libpq quotes the parts of a connection string it
cannot parse (`invalid percent-encoded token: "s3cr3t%PW"`, `missing "=" after "PW"`), and
psycopg_pool logs those messages while it retries. A secret is registered once, when the
database URL is read, and from then on every log line and every printed error is scrubbed.
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import unquote, urlsplit, urlunsplit

MASK = "***"
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
# In key=value form an unquoted password with a space runs on until the next keyword:
# `password=s3cr3t PW dbname=app` means the user's password was "s3cr3t PW".
_PASSWORD_RUN = re.compile(r"password\s*=\s*(?!')(.*?)(?=\s+\w+\s*=|\s*$)", re.IGNORECASE)
_QUOTED_PASSWORD = re.compile(r"password\s*=\s*'((?:[^'\\]|\\.)*)'", re.IGNORECASE)
_MIN_FRAGMENT = 2  # a one-character "fragment" would mask every such letter of a message

_lock = threading.Lock()
_secrets: set[str] = set()


def mask_dsn(dsn: str) -> str:
    """The DSN with any password replaced by `***`, for screens, logs and errors."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return "(unparseable database URL, not shown)"
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user, _, password = userinfo.partition(":")
            if password:
                userinfo = user + ":" + MASK
            netloc = f"{userinfo}@{host}"
        query = _PASSWORD_KV.sub(r"\1" + MASK, parts.query.replace("&", " ")).replace(" ", "&")
        return scrub(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))
    return scrub(_PASSWORD_KV.sub(r"\1" + MASK, dsn))


def password_fragments(dsn: str) -> set[str]:
    """Every form in which a DSN's password could be echoed back: raw, percent-decoded,
    and each of its words (libpq reports an unquoted `password=a b` as a stray `b`)."""
    found: set[str] = set()
    if "://" in dsn:
        netloc = dsn.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
        if "@" in netloc:
            userinfo = netloc.rsplit("@", 1)[0]
            if ":" in userinfo:
                raw = userinfo.split(":", 1)[1]
                found |= {raw, unquote(raw)}
        query = dsn.split("?", 1)[1] if "?" in dsn else ""
        for pair in query.split("&"):
            key, _, value = pair.partition("=")
            if key.strip().lower() == "password" and value:
                found |= {value, unquote(value)}
    else:
        found |= {m.group(1) for m in _QUOTED_PASSWORD.finditer(dsn)}
        found |= {m.group(1).strip() for m in _PASSWORD_RUN.finditer(dsn)}
    words = {word for secret in found for word in re.split(r"[\s%'\"]+", secret)}
    return {s for s in found | words if len(s) >= _MIN_FRAGMENT}


def register(*secrets: str | None) -> None:
    """Scrub these from every message from now on (empty and one-character ones ignored)."""
    with _lock:
        _secrets.update(s for s in secrets if s and len(s) >= _MIN_FRAGMENT)


def register_dsn(dsn: str) -> None:
    """Register every fragment of a DSN's password (see `password_fragments`)."""
    register(*password_fragments(dsn))


def scrub(text: str) -> str:
    """`text` with every registered secret replaced by `***` (longest first)."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class ScrubFilter(logging.Filter):
    """A logging filter that scrubs registered secrets from each record's message.

    Installed on Taskboard's log handlers, so third-party loggers (psycopg_pool retrying a
    connection string it cannot parse) never write a password either.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            record.fields = {
                k: scrub(v) if isinstance(v, str) else v for k, v in fields.items()
            }
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            if scrub(str(exc)) != str(exc):
                record.exc_info = None
                record.msg = f"{record.msg} ({type(exc).__name__}: {scrub(str(exc))})"
        return True
