"""Finding the row that makes a claim fail, and putting it aside.

When a claim fails on something other than the connection, the worker tries each row the
claim would have looked at on its own, each trial in a savepoint that is rolled back (so the
probe claims nothing). A row is quarantined (made dead with the reason) when it fails alone
while another row succeeds, or, with no row to compare, when its error is about its data
(a value out of range, a constraint, a trigger's refusal) and differs from the other failing
rows' errors. An error every row meets (a privilege revoked, a column gone, one refusal
word for word) is not a row's fault: no row is touched, and the supervisor judges it.

The probe locks each row before its trial and quarantines in the same transaction: were the
lock let go between the trial and the quarantine, another worker's claim could take the
poison row in that gap and fail once more (a 10-minute soak logged 'unexpected error' so,
with two poison rows and three workers probing at once).

A claim of one row that times out is probed apart (`probe_size`): each row is tried in its
own use of the connection, since a trial may run out the statement timeout, and a row is
quarantined when its claim alone times out while its size, read without its payload,
answers at once and is large: its payload is to blame, not the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import psycopg
from taskboard.core.engine import leases
from taskboard.core.engine.claim_size import is_timeout
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import describe, is_transient
from taskboard.core.engine.records import ClaimedJob

# At least this many candidates of each sort (expired, fresh) are tried, and never fewer
# than the failed claim looked at: the row that broke it may be anywhere among those.
PROBE_LIMIT = 20
# A trial skips a row another worker holds locked at that moment; with every worker
# retrying the same failing claim, the poison row is often one of them (three workers' probes
# all found nothing in the short fault run). Such rows are tried again, a few times.
PROBE_ROUNDS = 5
PROBE_PAUSE_SECONDS = 0.05
# The claim skips rows others hold locked (their claims, their probes' trial claims) and
# reaches further down the queue than its `limit` first rows; the probe, which takes no
# locks, then finds those first rows innocent. So when a window shows nobody, the next
# window of as many rows is tried, a few times (seen in a 10-minute soak).
PROBE_WIDENINGS = 4
# Rows tried by `probe_size`: the first ones of each sort (expired, fresh) a claim takes.
SIZE_PROBE_ROWS = 8
# A row whose claim alone times out is blamed for its size only from this size up: a smaller
# one timing out says the server is slow, and is left to be claimed again.
LARGE_ROW_BYTES = 64 * 1024
# SQLSTATE classes of errors a single row's values can cause.
_ROW_CLASSES = ("22", "23", "P0")


@dataclass
class Probe:
    """What trying each candidate alone showed."""

    guilty: list[tuple[int, Exception]] = field(default_factory=list)
    innocent: int = 0
    quarantined: list[tuple[int, str]] = field(default_factory=list)  # (job id, reason)
    # Rows the quarantine itself failed on: the worker skips them from now on.
    unquarantinable: list[tuple[int, Exception]] = field(default_factory=list)

    @property
    def to_quarantine(self) -> list[tuple[int, Exception]]:
        """The rows to put aside (see the module docstring)."""
        if self.innocent:
            return self.guilty
        # No row claimed fine to compare with (the queue holds only these rows, or the
        # others were held by other workers): rows whose errors are about their data and
        # differ from one another are each to blame; one error every row meets word for
        # word (a trigger refusing all claims) is not a row's fault. Two poison rows alone
        # in a queue were never quarantined before this (a 10-minute soak).
        if not all(_about_data(exc) for _, exc in self.guilty):
            return []
        messages = {str(exc) for _, exc in self.guilty}
        if len(messages) == len(self.guilty):
            return self.guilty
        return []


def _about_data(exc: Exception) -> bool:
    state = exc.sqlstate if isinstance(exc, psycopg.Error) else None
    return bool(state) and str(state).startswith(_ROW_CLASSES)


class ClaimScope(TypedDict):
    """What the claim that failed was asked for, which each trial's claim asks again."""

    worker_id: str
    lease_seconds: float
    queues: Sequence[str]
    kinds: Sequence[str]
    skip: Sequence[int]


async def probe(
    engine: HeldConnection, *, limit: int = PROBE_LIMIT, **scope: Unpack[ClaimScope]
) -> Probe:
    """Try every candidate's claim alone (`_try_each`), again for those another worker held
    locked, then the next window of candidates while nobody is found, and quarantine what
    `Probe.to_quarantine` names; `limit`: how many rows the claim that failed asked for."""
    found = Probe()
    tried: list[int] = []
    async with engine.use("probing the claim row by row") as conn:
        for _ in range(PROBE_WIDENINGS):
            pending = await leases.claim_candidates(
                conn, limit=max(limit, PROBE_LIMIT), queues=scope["queues"],
                kinds=scope["kinds"], skip=[*scope["skip"], *tried],
            )
            if not pending:
                break
            tried += pending
            for attempt in range(PROBE_ROUNDS):
                if attempt:
                    await asyncio.sleep(PROBE_PAUSE_SECONDS)
                pending = await _try_each(conn, pending, found, scope)
                if found.guilty or not pending:
                    break
            if found.guilty:
                break
    return found


async def _try_each(
    conn: psycopg.AsyncConnection[Any],
    candidates: Sequence[int],
    found: Probe,
    scope: ClaimScope,
) -> list[int]:
    """Lock each candidate and try its claim alone in a rolled-back savepoint, then
    quarantine the guilty while still holding their locks; the rows another worker held
    locked (its claim or its probe), to try again."""
    locked: list[int] = []
    async with conn.transaction():
        for job_id in candidates:
            if not await leases.lock_for_probe(conn, job_id):
                locked.append(job_id)  # held by another, or no longer claimable
                continue
            try:
                claimed = await _trial(conn, job_id, scope)
            except psycopg.Error as exc:
                if is_transient(exc):
                    raise
                found.guilty.append((job_id, exc))
            else:
                if claimed:
                    found.innocent += 1
                else:
                    locked.append(job_id)
        for job_id, trial_error in found.to_quarantine:
            reason = f"quarantined: claiming it fails ({describe(trial_error)})"
            await _quarantine(conn, job_id, reason, found)
    return locked


async def probe_size(engine: HeldConnection, **scope: Unpack[ClaimScope]) -> Probe:
    """A claim of one row timed out: try the first rows a claim would take, each alone, and
    quarantine those whose claim alone times out for their size (the module docstring)."""
    found = Probe()
    async with engine.use("listing the rows a claim would take") as conn:
        candidates = await leases.claim_candidates(
            conn, limit=SIZE_PROBE_ROWS, queues=scope["queues"], kinds=scope["kinds"],
            skip=scope["skip"],
        )
    for job_id in candidates:
        async with engine.use("probing one row's claim") as conn, conn.transaction():
            if not await leases.lock_for_probe(conn, job_id):
                continue
            try:
                claimed = await _trial(conn, job_id, scope)
            except psycopg.Error as exc:
                if not is_timeout(exc):
                    if is_transient(exc):
                        raise
                    continue  # not about its size: the ordinary probe's to find
                reason = await _blame_size(conn, job_id)
                if reason is not None:
                    await _quarantine(conn, job_id, reason, found)
            else:
                found.innocent += bool(claimed)
    return found


async def _trial(
    conn: psycopg.AsyncConnection[Any], job_id: int, scope: ClaimScope
) -> list[ClaimedJob]:
    """The failed claim for one locked row alone, in a savepoint rolled back: it claims
    nothing, and raises what the row makes the claim raise."""
    async with conn.transaction(force_rollback=True):
        return await leases.claim(conn, limit=1, only=[job_id], **scope)


async def _blame_size(conn: psycopg.AsyncConnection[Any], job_id: int) -> str | None:
    """The quarantine reason of a row whose claim alone timed out, if its size explains it."""
    size = await leases.row_size(conn, job_id)
    if size is None:
        return None
    known, stored = size
    if max(known or 0, stored) < LARGE_ROW_BYTES:
        return None
    if known is not None:
        return f"quarantined: claiming it alone times out; its payload is {known} bytes"
    return (
        f"quarantined: claiming it alone times out; its payload takes {stored} bytes as "
        "stored (written without its size, perhaps larger as text)"
    )


async def _quarantine(
    conn: psycopg.AsyncConnection[Any], job_id: int, reason: str, found: Probe
) -> None:
    try:
        async with conn.transaction():
            done = await leases.quarantine(conn, job_id, None, reason)
    except psycopg.Error as q_exc:
        if is_transient(q_exc):
            raise
        found.unquarantinable.append((job_id, q_exc))
    else:
        if done:
            found.quarantined.append((job_id, reason))
