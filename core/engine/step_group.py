"""Checkpoints grouped: the step records of one worker's attempts that arrive while another
is being written go together in the next statement, one commit for all of them.

Each checkpoint is a commit (an fsync) on the worker's one engine connection, so a worker
wrote at most one record per commit time, however many jobs reached a step at once (a
one-step job ran at about a tenth of a no-op's rate, `bench/steps_cost.py`). Now the first
record to arrive is written at once, alone, and those that arrive meanwhile wait for it and
then go in one statement: no record waits for a timer, and under load one commit serves as
many as are waiting. Each record is still checked against its own job's lease token while
that row is held (`sql.RECORD_STEPS`), so grouping changes no outcome; a row another
session holds is skipped, its record alone answering `BUSY` (tried again by its caller), so
one job being reclaimed never holds the others back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from taskboard.core import sql
from taskboard.core.engine.connection import HeldConnection

STEPS = "steps"
BUSY = "busy"  # the job's row was held by another session: nothing written, try again


@dataclass
class _Waiting:
    params: dict[str, Any]
    outcome: asyncio.Future[str]


class CheckpointGroup:
    """One per worker: the records waiting for the statement in flight to end."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._waiting: list[_Waiting] = []

    async def record(self, engine: HeldConnection, params: dict[str, Any]) -> str:
        """Write one record (id, token, name, result, attempt, worker) with any others
        waiting; returns `recorded`, `rejected` or `BUSY`, or raises as the statement did."""
        mine = _Waiting(params, asyncio.get_running_loop().create_future())
        self._waiting.append(mine)
        async with self._lock:
            if not mine.outcome.done():
                batch, self._waiting = self._waiting, []
                try:
                    await _write(engine, batch)
                finally:
                    # Cancelled mid-write: the others go with the next statement (a record
                    # already written answers `recorded` again: ON CONFLICT).
                    self._waiting[:0] = [
                        w for w in batch if w is not mine and not w.outcome.done()
                    ]
        return mine.outcome.result()


async def _write(engine: HeldConnection, batch: list[_Waiting]) -> None:
    params = [w.params for w in batch]
    try:
        async with engine.use(STEPS) as conn:
            cur = await conn.execute(sql.RECORD_STEPS, {
                "ids": [p["id"] for p in params],
                "tokens": [p["token"] for p in params],
                "names": [p["name"] for p in params],
                "results": [p["result"] for p in params],
                "attempts": [p["attempt"] for p in params],
                "worker": params[0]["worker"],
            })
            answers = {(job, name): outcome for job, name, outcome in await cur.fetchall()}
    except Exception as exc:
        for w in batch:
            w.outcome.set_exception(exc)
        return
    for w in batch:
        w.outcome.set_result(answers[(w.params["id"], w.params["name"])])
