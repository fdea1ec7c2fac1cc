"""Validated jobs as the enqueue statements take them: one binary array per column."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from taskboard.core.pg_arrays import (
    encoded_text_array,
    float8_array,
    int4_array,
    text_array,
    timestamptz_array,
)

# One row: position in the caller's batch, kind, payload (JSON, encoded as the connection
# sends text), queue, priority, run_at, max_attempts, timeout, unique key.
Row = tuple[int, str, bytes, str, int, datetime | None, int, float | None, str | None]


class JobRows:
    """Validated jobs, one tuple each, turned into one array per column when sent (a
    tuple per job and one transposition cost less than nine appends per job)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        # The enqueuer's trace context, the same for every row of a batch (one span).
        self.trace: dict[str, str | None] = {"traceparent": None, "tracestate": None}

    @property
    def at(self) -> list[int]:
        """Each row's position in the caller's batch."""
        return [row[0] for row in self.rows]

    def params(self, encoding: str, *, wake: bool = False) -> dict[str, Any]:
        """The statement's parameters; with `wake`, the distinct queues to notify.

        A column that is all NULL (no job has a run_at, say) goes as one NULL: unnest of
        several arrays pads the missing ones with NULLs.
        """
        _, kinds, payloads, queues, priorities, run_ats, attempts, timeouts, keys = zip(
            *self.rows, strict=True)
        n = len(self.rows)
        out: dict[str, Any] = {
            "kinds": text_array(kinds, encoding, repeated=True),
            "payloads": encoded_text_array(payloads),
            "queues": text_array(queues, encoding, repeated=True),
            "priorities": int4_array(priorities),
            "run_ats": None if run_ats.count(None) == n else timestamptz_array(run_ats),
            "max_attempts": int4_array(attempts),
            "timeouts": None if timeouts.count(None) == n else float8_array(timeouts),
            **self.trace,
        }
        if wake:
            out["wake"] = text_array(sorted(set(queues)), encoding)
        else:
            out["keys"] = text_array(keys, encoding)
        return out
