"""A job's durable steps as `history` and the job detail screen show them: each checkpoint a
worker tried to write, recorded or refused by the fence."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from taskboard.core import sql

RESULT_SHOWN_CHARS = 200


@dataclass(frozen=True)
class StepRecord:
    """One checkpoint: `recorded` (trusted, replayed by later attempts) or `rejected` (the
    fence refused it: the step's effect happened under a lease that was no longer held)."""

    name: str
    outcome: str
    attempt: int
    worker_id: str
    recorded_at: datetime
    result: Any


async def job_steps(conn: AsyncConnection[Any], job_id: int) -> tuple[StepRecord, ...]:
    """The job's checkpoints, oldest first."""
    async with conn.cursor(row_factory=class_row(StepRecord)) as cur:
        await cur.execute(sql.JOB_STEPS, {"id": job_id})
        return tuple(await cur.fetchall())


def step_line(s: StepRecord) -> str:
    """One line: name, claim, worker, and what the record says."""
    head = f"{s.name}  claim #{s.attempt}  {s.worker_id}  {s.recorded_at:%Y-%m-%d %H:%M:%S}"
    if s.outcome == "rejected":
        return f"{head}  rejected: effect happened, record fenced out"
    return f"{head}  recorded  {shown_result(s.result)}"


def shown_result(value: Any) -> str:
    """A result as compact JSON, cut to `RESULT_SHOWN_CHARS`."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=True)
    return text if len(text) <= RESULT_SHOWN_CHARS else text[: RESULT_SHOWN_CHARS - 3] + "..."
