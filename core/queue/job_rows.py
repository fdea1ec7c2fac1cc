"""Validated jobs as the enqueue statements take them: one binary array per column, and
the batch they came in, whose ids fill in as the statements answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from taskboard.core.queue.dependencies import check_after
from taskboard.core.queue.pg_arrays import (
    encoded_text_array,
    float8_array,
    int4_array,
    text_array,
    timestamptz_array,
)

if TYPE_CHECKING:
    from taskboard.core.queue.jobs import NewJob

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

    def answered(
        self, answers: Sequence[tuple[int, int | None, bool]], ids: list[int], existed: list[bool]
    ) -> JobRows:
        """Note ENQUEUE_UNIQUE_MANY's answers (row number from 1, id, was there already) in
        `ids` and `existed` by batch position; returns the rows to send again."""
        again = JobRows()
        again.trace = self.trace
        for n, job_id, held in answers:
            row = self.rows[n - 1]
            if job_id is None:
                # The job holding the key finished between the insert and the look-up, or
                # its enqueue committed after this statement began: once more for this one.
                again.rows.append(row)
            else:
                ids[row[0]], existed[row[0]] = job_id, held
        return again


@dataclass
class Batch:
    """A validated batch on its way in (`jobs._validate_batch`, sync or async): the rows to
    insert, and each job's id and whether its key's job was there already, filled in as the
    statements answer."""

    jobs: Sequence[NewJob]
    plain: JobRows  # the jobs without a unique key
    unique: JobRows  # one row per distinct (kind, key)
    dups: dict[int, int]  # each later duplicate's position -> its first occurrence's
    ids: list[int]
    existed: list[bool]

    @property
    def waits(self) -> bool:
        """Some job waits for others (`after`), attached in the inserts' transaction."""
        return any(job.after for job in self.jobs)

    def parents(self) -> list[tuple[int, tuple[int, ...]]]:
        """(id, parent ids) of each inserted job that waits; a unique job that was there
        already keeps the parents it had."""
        return [(self.ids[at], check_after(job.after)) for at, job in enumerate(self.jobs)
                if job.after and not self.existed[at] and at not in self.dups]

    def settled(self) -> tuple[list[int], list[bool]]:
        """The ids in input order (a duplicate gets its first occurrence's), and which
        were there already."""
        for at, seen in self.dups.items():
            self.ids[at], self.existed[at] = self.ids[seen], True
        return self.ids, self.existed
