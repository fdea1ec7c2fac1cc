"""The attempt an external call says it belongs to: the `X-Taskboard-*` headers.

Handlers put them on every email (message headers) and every Stripe request (HTTP request
headers). The stand-ins read them back so an audit can match each effect to the claim that
made it and check that the effect started before that claim's local deadline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

JOB_HEADER = "X-Taskboard-Job"
ATTEMPT_HEADER = "X-Taskboard-Attempt"
DEADLINE_HEADER = "X-Taskboard-Deadline"


@dataclass(frozen=True)
class AttemptStamp:
    """Job, attempt (the claim's ordinal) and local deadline (epoch seconds) of one call.

    Each part is None when its header is missing or malformed: the stand-ins record what
    arrived and leave judging it to whoever reads the record.
    """

    job: int | None = None
    attempt: int | None = None
    deadline: float | None = None


def read_stamp(header: Callable[[str], str | None]) -> AttemptStamp:
    """The stamp from a header lookup (`header(name)` returns the value or None)."""
    return AttemptStamp(
        job=_int(header(JOB_HEADER)),
        attempt=_int(header(ATTEMPT_HEADER)),
        deadline=_seconds(header(DEADLINE_HEADER)),
    )


def _int(value: str | None) -> int | None:
    text = (value or "").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float((value or "").strip())
    except ValueError:
        return None
    # float() accepts "nan" and "inf"; neither is a moment anything could be compared to.
    return seconds if math.isfinite(seconds) else None
