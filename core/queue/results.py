"""A job's result: what its handler returned, once the job completed.

`result()` waits on the `taskboard_finished` channel (a statement trigger notifies when
jobs complete, go dead or are cancelled) instead of polling; a slow poll backs it up, since
LISTEN does not survive a transaction-mode pooler and a connection inside a transaction
hears nothing until it ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from taskboard.core import sql
from taskboard.core.base.errors import NoResult

CHANNEL = "taskboard_finished"
FALLBACK_POLL_SECONDS = 5.0


async def result(
    conn: AsyncConnection[Any], job_id: int, *, timeout: float | None = 0.0
) -> Any:
    """The result of job `job_id` (None for a handler that returned nothing).

    Waits up to `timeout` seconds (None: for ever; 0: not at all) for the job to finish.
    Raises `NoResult` (its `state` says why) when the job is not finished by then, ended
    dead or cancelled, or does not exist (never did, or was pruned with its result).
    """
    loop = asyncio.get_running_loop()
    until = None if timeout is None else loop.time() + max(0.0, timeout)
    listening = False
    try:
        while True:
            found = await _read(conn, job_id)
            if found is not None:
                return found[0]
            left = None if until is None else until - loop.time()
            if left is not None and left <= 0:
                await _read(conn, job_id, final=True)  # raises, saying which state
            if not listening and conn.autocommit:
                await conn.execute(sql.LISTEN_FINISHED)
                listening = True
                continue  # it may have finished before we listened
            wait = FALLBACK_POLL_SECONDS if left is None else min(left, FALLBACK_POLL_SECONDS)
            # The channel says "some jobs ended" (one empty notification per statement):
            # any of it is the cue to read this job again.
            async for note in conn.notifies(timeout=wait):
                if note.channel == CHANNEL:
                    break
    finally:
        if listening and not conn.closed:
            await conn.execute(sql.UNLISTEN_FINISHED)


async def _read(
    conn: AsyncConnection[Any], job_id: int, *, final: bool = False
) -> tuple[Any] | None:
    """(result,) once completed; None while unfinished; `NoResult` when it never will be
    (or, with `final`, when it is not yet)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql.JOB_RESULT, {"id": job_id})
        row = await cur.fetchone()
    if row is None:
        raise NoResult(f"job {job_id} does not exist (or was pruned with its result)", "missing")
    if row["completed"]:
        return (row["result"],)
    if row["dead"]:
        error = f": {row['last_error']}" if row["last_error"] else ""
        raise NoResult(f"job {job_id} is dead, no result{error}", "dead")
    if row["cancelled"]:
        raise NoResult(f"job {job_id} was cancelled, no result", "cancelled")
    if final:
        raise NoResult(f"job {job_id} has not finished yet ({row['state']})", row["state"])
    return None
