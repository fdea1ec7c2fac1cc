"""The operator commands: `enqueue` (with unique keys), `prune`, `health`, `schedule`,
`queue`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.base.errors import ConfigError
from taskboard.core.base.secrets import one_line
from taskboard.core.kinds import KindRegistry
from taskboard.core.operations import cron
from taskboard.core.operations.queues import pause_queue, paused_queues, resume_queue
from taskboard.core.operations.retention import Pruned, Retention, prune
from taskboard.core.operations.schedules import (
    Schedule,
    add_schedule,
    list_schedules,
    remove_schedule,
)
from taskboard.core.queue.jobs import NewJob, enqueue_detailed
from taskboard.core.view.health import read_health
from taskboard.core.view.health_text import report_lines
from taskboard.core.view.status import GONE_AFTER_SECONDS

EXIT_OK = 0
MAX_PRUNE_BATCH = 100_000
MAX_HEALTH_WINDOW = 60.0
PROGRESS_EVERY_SECONDS = 1.0
_JOB_STATES = ("pending", "scheduled", "running", "completed", "dead", "cancelled")


def as_json(value: Any) -> Any:
    """`json.dumps`'s fallback: times as ISO 8601, the rest as text."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _when(value: datetime | None, tz: str = "UTC") -> str:
    """A time in zone `tz` (a schedule's), never in the database session's."""
    if value is None:
        return "never"
    try:
        where = cron.zone(tz)
    except cron.CronError:
        where = UTC
    return f"{value.astimezone(where):%Y-%m-%d %H:%M:%S %Z}"


async def db_now(conn: AsyncConnection[Any]) -> datetime:
    """The database's clock (every schedule's next run is computed from it)."""
    cur = await conn.execute(sql.DB_NOW)
    row = await cur.fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


async def enqueue(conn: AsyncConnection[Any], job: NewJob, registry: KindRegistry) -> int:
    """Print the job's id; with a unique key already held, say which job holds it."""
    [done] = await enqueue_detailed(conn, registry, [job])
    print(done.id)
    if done.existed:
        print(f"already enqueued as #{done.id}", file=sys.stderr)
    return EXIT_OK


async def health(conn: AsyncConnection[Any], args: argparse.Namespace) -> int:
    """The queue's health, graded, with one sentence on what to do (exit 0 whatever the
    grade: it is a reading, not a failure of the command)."""
    if not 0 <= args.window <= MAX_HEALTH_WINDOW:
        raise ConfigError(f"--window must be 0 to {MAX_HEALTH_WINDOW:g} seconds")
    report = await read_health(conn, window=args.window)
    if args.json:
        print(json.dumps(dataclasses.asdict(report), default=as_json, indent=2))
        return EXIT_OK
    for line in report_lines(report):
        print(line)
    return EXIT_OK


async def run_prune(conn: AsyncConnection[Any], args: argparse.Namespace) -> int:
    """Prune until nothing is past its age; progress on stderr while batches stay full."""
    if not 1 <= args.batch <= MAX_PRUNE_BATCH:
        raise ConfigError(f"--batch must be between 1 and {MAX_PRUNE_BATCH}, got {args.batch}")
    retention = (
        Retention() if args.older_than is None else Retention.all_older_than(args.older_than)
    )
    done = await prune(conn, retention, batch=args.batch, progress=_progress(args.batch))
    if done.skipped:
        print("another process is pruning right now (it holds the prune lock); nothing done")
        return EXIT_OK
    print(f"pruned {done.jobs} finished jobs and {done.workers} workers")
    return EXIT_OK


def _progress(batch: int) -> Callable[[Pruned], None]:
    """A long run (a full batch: more may follow) says how far it got, at most once a second."""
    last = [float("-inf")]

    def report(p: Pruned) -> None:
        now = time.monotonic()
        if p.jobs < p.batches * batch or now - last[0] < PROGRESS_EVERY_SECONDS:
            return
        last[0] = now
        print(f"pruned {p.jobs} finished jobs so far ({p.batches} batches)...",
              file=sys.stderr, flush=True)

    return report


async def schedule(
    conn: AsyncConnection[Any],
    args: argparse.Namespace,
    checked: Schedule | None,
    registry: KindRegistry,
) -> int:
    """`schedule add|list|remove`."""
    if args.action == "add":
        assert checked is not None
        new = await add_schedule(conn, registry, checked)
        nxt = checked.next_run(await db_now(conn))
        print(f"schedule {checked.name} {'added' if new else 'updated'}: {checked.kind} "
              f"every '{checked.cron}' ({checked.tz}), next run {_when(nxt, checked.tz)}")
        return EXIT_OK
    if args.action == "remove":
        await remove_schedule(conn, args.name)
        print(f"schedule {args.name} removed")
        return EXIT_OK
    rows = schedule_rows(await list_schedules(conn), await db_now(conn))
    if args.json:
        print(json.dumps(rows, indent=2, default=as_json))
        return EXIT_OK
    print_schedules(rows)
    return EXIT_OK


def schedule_rows(schedules: list[Schedule], now: datetime) -> list[dict[str, Any]]:
    """Schedules as plain rows, each with its next run from the database's `now` (None, and
    the reason in `error`, for one that is disabled or cannot be evaluated). Times are UTC."""

    def utc(value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    return [
        {
            "name": s.name, "cron": s.cron, "tz": s.tz, "kind": s.kind, "queue": s.queue,
            "priority": s.priority, "max_attempts": s.max_attempts,
            "timeout": s.timeout_seconds, "payload": s.payload,
            "last_slot": utc(s.last_slot), "next_run": s.upcoming(now),
            "enabled": s.disabled_at is None, "disabled_at": utc(s.disabled_at),
            "error": s.problem(now),
        }
        for s in schedules
    ]


def print_schedules(rows: list[dict[str, Any]], indent: str = "") -> None:
    """One line per schedule; a disabled one says so, with its error."""
    if not rows:
        print(f"{indent}no schedules")
    for r in rows:
        tz = r["tz"]
        zone = "" if tz == "UTC" else f" {one_line(tz)}"
        head = (f"{indent}{one_line(r['name']):<20} {one_line(r['cron'])!r:<16}{zone} "
                f"{one_line(r['kind']):<8} queue {r['queue']:<10} "
                f"last slot {_when(r['last_slot'], tz)}  ")
        if not r["enabled"]:
            print(f"{head}DISABLED since {_when(r['disabled_at'], tz)}: {one_line(r['error'])}")
        elif r["next_run"] is None:
            print(f"{head}next run NONE: {one_line(r['error'] or 'unknown')}")
        else:
            print(f"{head}next run {_when(r['next_run'], tz)}")


async def queue(conn: AsyncConnection[Any], args: argparse.Namespace) -> int:
    """`queue pause|resume|list`."""
    if args.action == "pause":
        known = await queue_known(conn, args.queue)
        await pause_queue(conn, args.queue, args.reason)
        print(f"queue {args.queue} paused: no worker claims from it until "
              f"`taskboard queue resume {args.queue}`")
        if not known:
            # Allowed (a pause ahead of a deploy), but a typo would pause nothing real.
            print(f"warning: queue {args.queue!r} has never held a job and no live worker "
                  "works it: is the name right?", file=sys.stderr)
        return EXIT_OK
    if args.action == "resume":
        await resume_queue(conn, args.queue)
        print(f"queue {args.queue} resumed")
        return EXIT_OK
    rows = await queue_rows(conn)
    if args.json:
        print(json.dumps(rows, indent=2, default=as_json))
        return EXIT_OK
    if not rows:
        print("no queues (no jobs, none paused)")
    for r in rows:
        counts = "  ".join(f"{state} {r[state]}" for state in _JOB_STATES[:3])
        state = "paused " if r["paused"] else "active "
        line = f"{r['name']:<20} {state} {counts}"
        if r["paused"]:
            line += f"  since {_when(r['paused_at'])}"
            if r["reason"]:
                line += f" ({one_line(r['reason'])})"
        print(line)
    return EXIT_OK


async def queue_known(conn: AsyncConnection[Any], name: str) -> bool:
    """Whether `name` ever held a job, is worked by a live worker, or was paused before."""
    cur = await conn.execute(sql.QUEUE_KNOWN, {"name": name, "gone_after": GONE_AFTER_SECONDS})
    row = await cur.fetchone()
    return bool(row and row[0])


async def queue_rows(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
    """Every queue with jobs (from the counts kept without a scan of finished rows) or
    paused, with its jobs by state and its pause."""
    cur = await conn.execute(sql.JOB_COUNTS_BY_QUEUE)
    counts: dict[str, dict[str, int]] = {}
    for name, state, n in await cur.fetchall():
        counts.setdefault(name, {})[state] = int(n)
    paused = {p.name: p for p in await paused_queues(conn)}
    rows = []
    for name in sorted(set(counts) | set(paused)):
        p = paused.get(name)
        by_state = counts.get(name, {})
        rows.append({
            "name": name,
            "paused": p is not None,
            "paused_at": p.paused_at if p else None,
            "reason": p.reason if p else None,
            **{state: by_state.get(state, 0) for state in _JOB_STATES},
        })
    return rows
