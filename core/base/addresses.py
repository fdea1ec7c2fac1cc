"""Email addresses and host names: parsed and checked once, for payloads and settings.

Shared by the `email` kind (recipients, senders) and the services' settings (the sender
address, the Message-ID domain), which is why it lives outside both.
"""

from __future__ import annotations

import re
from email.headerregistry import Address
from email.policy import default as default_policy
from typing import Any

MAX_ADDRESS_CHARS = 320
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def parse_address(value: Any) -> Address:
    """Parse one mailbox (`maya@example.com` or `Maya <maya@example.com>`).

    Returns it with the domain in ASCII (IDNA). Raises `ValueError` saying what is wrong.
    """
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    if has_control(value):
        raise ValueError("must not contain line breaks or control characters")
    if not value.strip():
        raise ValueError("must not be empty")
    if len(value) > MAX_ADDRESS_CHARS:
        raise ValueError(f"is longer than {MAX_ADDRESS_CHARS} characters")
    shown = value if len(value) <= 80 else value[:77] + "..."
    try:
        header = default_policy.header_factory("to", value)
    except Exception:  # the stdlib parser raises IndexError & co. on some garbage
        raise ValueError(f"{shown!r} is not an email address") from None
    if len(header.groups) != 1 or len(header.addresses) != 1:
        raise ValueError(f"{shown!r} holds several addresses; give one per entry")
    if header.groups[0].display_name is not None:
        raise ValueError(f"{shown!r} is an address group; give plain addresses")
    parsed = header.addresses[0]
    if header.defects or not parsed.username or not parsed.domain:
        raise ValueError(f"{shown!r} is not an email address")
    if not parsed.username.isascii():
        raise ValueError(f"{shown!r} has a non-ASCII local part, which SMTP servers may refuse")
    try:
        domain = parsed.domain.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError(f"{shown!r} has an invalid domain") from None
    if not is_hostname(domain):
        raise ValueError(f"{shown!r} has an invalid domain (expected e.g. example.com)")
    if len(parsed.username) > 64 or len(parsed.username) + len(domain) + 1 > 254:
        raise ValueError(f"{shown!r} is too long for SMTP")
    return Address(display_name=parsed.display_name, username=parsed.username, domain=domain)


def is_hostname(name: str) -> bool:
    """A DNS host name with at least two labels and a non-numeric top-level label."""
    labels = name.rstrip(".").split(".")
    return (
        len(name) <= 253
        and len(labels) >= 2
        and all(_HOST_LABEL.fullmatch(label) for label in labels)
        and not labels[-1].isdigit()
    )


def has_control(value: str) -> bool:
    # CR and LF are the header-injection risk; the other C0 controls and DEL have no
    # business in a header either.
    return any((ord(ch) < 32 and ch != "\t") or ch == "\x7f" for ch in value)
