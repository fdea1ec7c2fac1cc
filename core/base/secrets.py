"""Keeping secrets off screens, out of logs and out of error messages.

Three tools. `mask_dsn` rewrites a connection string with its password masked, for showing
where Taskboard is connected. `scrub` removes every registered secret from any text, for
messages Taskboard does not write itself: libpq quotes the parts of a connection string it
cannot parse (`invalid percent-encoded token: "s3cr3t%PW"`, `missing "=" after "PW"`), and
psycopg_pool logs those messages while it retries. `one_line` makes any message fit to print
as a one-line error: connection strings in it masked, secrets scrubbed, line breaks and
other control characters escaped.

A secret is registered once, when the database URL is read, and from then on every log
line and every printed error is scrubbed. Registration errs on the side of masking: a
password typed into a URL without percent-encoding (`maya:pa/ss@host`, `maya:pa@ss@host`)
makes libpq read parts of it as a port or a host name and quote them back, so each piece
of it is registered too.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from urllib.parse import unquote

from psycopg.conninfo import conninfo_to_dict

MASK = "***"
_SCHEME = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")
# In a message: a URL (masked as a URL; it does not end in the punctuation after it), or
# `password=` and its value, quoted or not.
_SECRET_IN_TEXT = re.compile(
    r"(?P<url>[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]*[^\s\"'<>).,;:])"
    r"|(?P<key>password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&\"]+)",
    re.IGNORECASE,
)
# In key=value form an unquoted password with a space runs on until the next keyword:
# `password=s3cr3t PW dbname=app` means the user's password was "s3cr3t PW".
_PASSWORD_RUN = re.compile(r"password\s*=\s*(?!')(.*?)(?=\s+\w+\s*=|\s*$)", re.IGNORECASE)
_QUOTED_PASSWORD = re.compile(r"password\s*=\s*'((?:[^'\\]|\\.)*)'", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&]*)", re.IGNORECASE)
# `host:5432/db?sslrootcert=/certs/a@b`: the '@' is in the path or query, not after a
# password.
_PORT_THEN_PATH = re.compile(r"[\d,]*[/?].*", re.DOTALL)
# Where a password is split when libpq misreads it: spaces, quotes, and the URL delimiters.
_WORD_BREAKS = re.compile(r"[\s%'\"/@:?#&=]+")
_QUOTED_TOKEN = re.compile(r'"([^"]*)"')
_MIN_FRAGMENT = 2  # a one-character "fragment" would mask every such letter of a message
# Characters that would break a one-line message or reorder what the terminal shows.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                           "\u2066\u2067\u2068\u2069")
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})

# Only these two spellings make `_SECRET_IN_TEXT` match: a text with neither is left as is
# without running it (a log line's fields are mostly ids, names and numbers).
_PASSWORD_WORD = re.compile("password", re.IGNORECASE)
_SCALARS = (int, float, bool, type(None))

_lock = threading.Lock()
_secrets: set[str] = set()
# Longest first, sorted when one is registered, not per message: `scrub` reads the tuple
# without the lock (a registration replaces it whole).
_ordered: tuple[str, ...] = ()


def is_url(dsn: str) -> bool:
    """Whether a connection string is a URL (`postgresql://...`) rather than key=value."""
    return _SCHEME.match(dsn) is not None


def _url_password_span(rest: str) -> tuple[int, int] | None:
    """Where the password is in a URL's text after `scheme://`, or None.

    The password runs from the first ':' of the user info to the *last* '@': libpq stops at
    the first '@' or '/', but then a password with an unencoded '@' or '/' would be shown
    in part. The exceptions are a port followed by a path (`host:5432/db?x=a@b`) and an
    IPv6 host, where the '@' is not after a password at all.
    """
    at = rest.rfind("@")
    if at < 0:
        return None
    colon = rest.find(":", 0, at)
    if colon < 0:
        return None
    user = rest[:colon]
    if any(ch in user for ch in "/?#[]"):
        return None
    if colon + 1 == at or _PORT_THEN_PATH.fullmatch(rest[colon + 1 : at]):
        return None
    return colon + 1, at


def _mask_url(url: str) -> str:
    start = url.index("://") + 3
    scheme, rest = url[:start], url[start:]
    span = _url_password_span(rest)
    if span is not None:
        rest = rest[: span[0]] + MASK + rest[span[1] :]
    return scheme + _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, rest)


def _mask_key_value(dsn: str) -> str:
    dsn = _QUOTED_PASSWORD.sub(lambda m: m.group(0)[: m.start(1) - m.start(0) - 1] + MASK, dsn)
    return _PASSWORD_RUN.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + MASK, dsn)


def mask_dsn(dsn: str) -> str:
    """The DSN with any password replaced by `***`, for screens, logs and errors."""
    masked = _mask_url(dsn) if is_url(dsn) else _mask_key_value(dsn)
    return scrub(masked)


def mask_text(text: str) -> str:
    """A message with every connection string in it masked and every secret scrubbed."""

    def one(match: re.Match[str]) -> str:
        if match.group("url"):
            return _mask_url(match.group("url"))
        return match.group("key") + MASK

    if _may_hold_a_dsn(text):
        text = _SECRET_IN_TEXT.sub(one, text)
    return scrub(text)


def _may_hold_a_dsn(text: str) -> bool:
    """Whether `_SECRET_IN_TEXT` could match: a URL needs "://", a key=value password the
    word "password" in any case (for ASCII text, `lower` folds exactly as the pattern's
    IGNORECASE; other text asks the same regex engine)."""
    if "://" in text:
        return True
    if text.isascii():
        return "password" in text.lower()
    return _PASSWORD_WORD.search(text) is not None


def mask_quoted(message: str) -> str:
    """libpq's message about a connection string it could not parse, with every token it
    quotes masked: any of them may be a piece of the password, even one letter long."""
    return _QUOTED_TOKEN.sub(lambda m: m.group(0) if m.group(1) == "=" else f'"{MASK}"', message)


def one_line(text: str) -> str:
    """`text` fit to print as a one-line error: masked and scrubbed (see `mask_text`), and
    line breaks, control characters, lone surrogates and bidirectional overrides escaped."""
    masked = mask_text(text.strip())
    out = []
    for ch in masked:
        if ch in _BIDI_CONTROLS or unicodedata.category(ch) in _UNPRINTABLE_CATEGORIES:
            code = ord(ch)
            named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch)
            out.append(named or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
        else:
            out.append(ch)
    return "".join(out)


def first_unprintable(text: str) -> str | None:
    """The first character of `text` that `one_line` would escape, or None."""
    for ch in text:
        if ch in _BIDI_CONTROLS or unicodedata.category(ch) in _UNPRINTABLE_CATEGORIES:
            return ch
    return None


def password_fragments(dsn: str) -> set[str]:
    """Every form in which a DSN's password could be echoed back: as libpq reads it, raw,
    percent-decoded, and each of its words (libpq reports an unquoted `password=a b` as a
    stray `b`, and `maya:pa/ss@host` as a port "pa")."""
    found: set[str] = set()
    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:  # a string libpq cannot parse: the forms below still apply
        password = None
    if password:
        found.add(str(password))
    if is_url(dsn):
        rest = dsn[dsn.index("://") + 3 :]
        span = _url_password_span(rest)
        if span is not None:
            raw = rest[span[0] : span[1]]
            found |= {raw, unquote(raw)}
        for match in _QUERY_PASSWORD.finditer(rest):
            found |= {match.group(2), unquote(match.group(2))}
    else:
        found |= {m.group(1) for m in _QUOTED_PASSWORD.finditer(dsn)}
        found |= {m.group(1).strip() for m in _PASSWORD_RUN.finditer(dsn)}
    words = {word for secret in found for word in _WORD_BREAKS.split(secret)}
    return {s for s in found | words if len(s) >= _MIN_FRAGMENT}


def has_password(dsn: str) -> bool:
    """Whether a DSN holds anything that could be a password."""
    return bool(password_fragments(dsn)) or "password" in dsn.lower()


def register(*secrets: str | None) -> None:
    """Scrub these from every message from now on (empty and one-character ones ignored)."""
    global _ordered
    with _lock:
        _secrets.update(s for s in secrets if s and len(s) >= _MIN_FRAGMENT)
        _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def register_dsn(dsn: str) -> None:
    """Register every fragment of a DSN's password (see `password_fragments`)."""
    register(*password_fragments(dsn))


def scrub(text: str) -> str:
    """`text` with every registered secret replaced by `***` (longest first)."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class ScrubFilter(logging.Filter):
    """A logging filter that masks connection strings and scrubs registered secrets from
    each record: its message, its structured fields, and its exception's text.

    Installed on Taskboard's log handlers, so third-party loggers (psycopg_pool retrying a
    connection string it cannot parse) never write a password either.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = mask_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            record.fields = _clean(fields)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            if mask_text(str(exc)) != str(exc):
                record.exc_info = None
                record.msg = f"{record.msg} ({type(exc).__name__}: {mask_text(str(exc))})"
        return True


def _clean(value: object) -> object:
    """Structured log fields with every string in them masked (see `mask_text`)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        # Numbers and None, most of an event's fields, are taken as they are, uncalled.
        return {key: item if isinstance(item, _SCALARS) else _clean(item)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    return value
