"""Queue health: is PostgreSQL able to clean up after the queue?

Every claim, renewal and completion leaves a dead row version in `taskboard_jobs`.
Autovacuum removes them only up to the xmin horizon: the oldest snapshot any session (or a
prepared transaction, or a replication slot) still needs. One transaction left open
anywhere in the database, say an idle psql or a stuck report, holds the horizon back, the
dead rows pile up, and every claim wades through them. This reads what PostgreSQL says
about it, grades it ok / amber / red against `Thresholds`, and says in one sentence what
to do. `taskboard health` prints it (`health_text`); the dashboard's health screen shows
it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import class_row
from taskboard.core import sql

Level = Literal["ok", "amber", "red"]
_RANK: dict[Level, int] = {"ok": 0, "amber": 1, "red": 2}
JOBS_TABLE = "taskboard_jobs"


@dataclass(frozen=True)
class Thresholds:
    """When a reading turns amber or red (the defaults suit a busy queue)."""

    holder_amber_seconds: float = 120.0
    holder_red_seconds: float = 900.0
    dead_amber_rows: int = 10_000
    dead_red_rows: int = 100_000
    dead_amber_share: float = 0.2  # dead rows of all row versions of the jobs table
    dead_red_share: float = 0.5
    slot_red_xids: int = 10_000_000
    claim_amber_ms: float = 20.0
    claim_red_ms: float = 100.0


@dataclass(frozen=True)
class TableHealth:
    """One Taskboard table: row versions alive and dead, and when it was last vacuumed."""

    relname: str
    n_live_tup: int
    n_dead_tup: int
    vacuumed: datetime | None  # by autovacuum or by hand, the later
    last_autovacuum: datetime | None

    @property
    def dead_share(self) -> float:
        """Dead row versions as a share of all of them (0 for an empty table)."""
        total = self.n_live_tup + self.n_dead_tup
        return self.n_dead_tup / total if total else 0.0


@dataclass(frozen=True)
class XminHolder:
    """The session holding the oldest snapshot: who, since when (never its query text)."""

    pid: int
    application: str
    role: str | None
    state: str | None
    xact_start: datetime | None
    query_start: datetime | None
    xid_age: int
    open_seconds: float | None
    database: str | None


@dataclass(frozen=True)
class PreparedHold:
    """A prepared transaction (two-phase commit) that holds the horizon."""

    gid: str
    prepared: datetime
    xid_age: int
    open_seconds: float


@dataclass(frozen=True)
class SlotHold:
    """A replication slot that keeps old row versions for its consumer."""

    slot_name: str
    slot_type: str
    active: bool
    xid_age: int


@dataclass(frozen=True)
class ClaimSample:
    """pg_stat_statements' running totals for the claim statements at one moment."""

    calls: int
    total_ms: float
    at: float  # monotonic seconds


@dataclass(frozen=True)
class HealthReport:
    """One reading of the queue's health, graded, with what to do."""

    level: Level
    advice: str  # one sentence: what to do (or that nothing needs doing)
    tables: tuple[TableHealth, ...]
    holder: XminHolder | None
    prepared: PreparedHold | None
    slots: tuple[SlotHold, ...]
    claim_mean_ms: float | None  # mean time of the claims between two samples
    claim_calls: int  # claims between the two samples
    claim_note: str  # how the claim time was measured, or why it was not
    sees_all_sessions: bool
    findings: tuple[tuple[Level, str], ...] = field(default_factory=tuple)
    sample: ClaimSample | None = None  # keep it for the next reading's difference


async def read_health(
    conn: AsyncConnection[Any],
    thresholds: Thresholds = Thresholds(),
    previous: ClaimSample | None = None,
    *,
    window: float = 0.0,
) -> HealthReport:
    """Read and grade the queue's health. The claim time is the mean over the claims made
    since `previous` (a sample from an earlier reading), or over `window` seconds waited
    here when there is none; with neither, it is not measured."""
    async with conn.cursor(row_factory=class_row(TableHealth)) as cur:
        await cur.execute(sql.TABLE_HEALTH)
        tables = tuple(await cur.fetchall())
    async with conn.cursor(row_factory=class_row(XminHolder)) as hcur:
        await hcur.execute(sql.OLDEST_XMIN_HOLDER)
        holder = await hcur.fetchone()
    async with conn.cursor(row_factory=class_row(PreparedHold)) as pcur:
        await pcur.execute(sql.OLDEST_PREPARED)
        prepared = await pcur.fetchone()
    async with conn.cursor(row_factory=class_row(SlotHold)) as scur:
        await scur.execute(sql.SLOTS_HOLDING)
        slots = tuple(await scur.fetchall())
    cur2 = await conn.execute(sql.SEES_ALL_SESSIONS)
    row = await cur2.fetchone()
    sees_all = bool(row and row[0])
    sample, note = await _claim_sample(conn)
    mean, calls = None, 0
    if sample is not None and previous is None and window > 0:
        previous = sample
        await asyncio.sleep(window)
        sample, note = await _claim_sample(conn)
    if sample is not None:
        if previous is None:
            note = "claim time: measured from the next reading on"
        else:
            calls = sample.calls - previous.calls
            span = sample.at - previous.at
            if calls > 0:
                mean = (sample.total_ms - previous.total_ms) / calls
                note = f"claim time: mean of {calls} claims in the last {span:.0f} s"
            else:
                note = f"claim time: no claims in the last {span:.0f} s"
    report = HealthReport(
        level="ok", advice="", tables=tables, holder=holder, prepared=prepared, slots=slots,
        claim_mean_ms=mean, claim_calls=calls, claim_note=note, sees_all_sessions=sees_all,
        sample=sample,
    )
    return grade(report, thresholds)


async def _claim_sample(conn: AsyncConnection[Any]) -> tuple[ClaimSample | None, str]:
    cur = await conn.execute(sql.STATEMENTS_INSTALLED)
    if await cur.fetchone() is None:
        return None, (
            "claim time: not measured, pg_stat_statements is not installed in this database "
            "(shared_preload_libraries, then CREATE EXTENSION pg_stat_statements)"
        )
    try:
        async with conn.transaction():
            cur = await conn.execute(sql.CLAIM_TIMING)
            row = await cur.fetchone()
    except psycopg.Error as exc:
        # Created but not loaded, or in a schema off the search path: say which.
        first = str(exc).strip().split("\n", 1)[0]
        return None, f"claim time: not measured, pg_stat_statements answered: {first}"
    assert row is not None
    return ClaimSample(calls=row[0], total_ms=row[1], at=asyncio.get_running_loop().time()), ""


def grade(report: HealthReport, t: Thresholds) -> HealthReport:
    """The report with its level, its findings (worst first) and one sentence of advice."""
    found: list[tuple[Level, str, str]] = []  # level, finding, advice
    h = report.holder
    if h is not None and h.open_seconds is not None:
        level = _level(h.open_seconds, t.holder_amber_seconds, t.holder_red_seconds)
        if level != "ok":
            found.append((
                level,
                f"pid {h.pid} ({h.application}) has held a snapshot for "
                f"{span(h.open_seconds)}",
                f"end the transaction of pid {h.pid} ({h.application}"
                + (f", role {h.role}" if h.role else "")
                + f", open since {clock(h.xact_start)}): vacuum cannot remove any dead row "
                f"newer than it; commit it in its application, or SELECT "
                f"pg_terminate_backend({h.pid})",
            ))
    p = report.prepared
    if p is not None:
        level = _level(p.open_seconds, t.holder_amber_seconds, t.holder_red_seconds)
        if level != "ok":
            found.append((
                level,
                f"prepared transaction {p.gid!r} open for {span(p.open_seconds)}",
                f"COMMIT PREPARED or ROLLBACK PREPARED {p.gid!r}: it holds the horizon back",
            ))
    for s in report.slots:
        if s.active:
            continue
        level = "red" if s.xid_age >= t.slot_red_xids else "amber"
        found.append((
            level,
            f"inactive replication slot {s.slot_name} holds {s.xid_age} transactions back",
            f"drop replication slot {s.slot_name} if its consumer is gone "
            f"(SELECT pg_drop_replication_slot('{s.slot_name}'))",
        ))
    jobs = next((x for x in report.tables if x.relname == JOBS_TABLE), None)
    if jobs is not None:
        level = _dead_level(jobs, t)
        if level != "ok":
            found.append((
                level,
                f"{JOBS_TABLE} has {jobs.n_dead_tup} dead row versions "
                f"({jobs.dead_share:.0%}), last vacuumed {clock(jobs.vacuumed)}",
                f"VACUUM {JOBS_TABLE} once nothing holds the horizon, and give it a lower "
                "autovacuum_vacuum_scale_factor",
            ))
    if report.claim_mean_ms is not None:
        level = _level(report.claim_mean_ms, t.claim_amber_ms, t.claim_red_ms)
        if level != "ok":
            found.append((
                level,
                f"claims take {report.claim_mean_ms:.1f} ms on average",
                "claims are slow: look for dead rows and an old snapshot above, then EXPLAIN "
                "the claim",
            ))
    found.sort(key=lambda f: -_RANK[f[0]])
    if not found:
        advice = "nothing holds cleanup back: nothing to do"
        if not report.sees_all_sessions:
            advice += " (sessions of other roles are hidden from this role: grant it "
            advice += "pg_read_all_stats to see them all)"
        return _replace(report, "ok", advice, ())
    return _replace(
        report, found[0][0], found[0][2], tuple((lv, text) for lv, text, _ in found)
    )


def _replace(
    r: HealthReport, level: Level, advice: str, findings: tuple[tuple[Level, str], ...]
) -> HealthReport:
    return HealthReport(
        level=level, advice=advice, tables=r.tables, holder=r.holder, prepared=r.prepared,
        slots=r.slots, claim_mean_ms=r.claim_mean_ms, claim_calls=r.claim_calls,
        claim_note=r.claim_note, sees_all_sessions=r.sees_all_sessions, findings=findings,
        sample=r.sample,
    )


def _level(value: float, amber: float, red: float) -> Level:
    return "red" if value >= red else "amber" if value >= amber else "ok"


def _dead_level(table: TableHealth, t: Thresholds) -> Level:
    if table.n_dead_tup >= t.dead_red_rows and table.dead_share >= t.dead_red_share:
        return "red"
    if table.n_dead_tup >= t.dead_amber_rows and table.dead_share >= t.dead_amber_share:
        return "amber"
    return "ok"


def span(seconds: float) -> str:
    """A duration in the largest units that matter: 42 s, 12m05s, 3h20m."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def clock(at: datetime | None) -> str:
    """A moment on the database's clock, or never."""
    return "never" if at is None else f"{at:%Y-%m-%d %H:%M:%S %Z}"
