"""Taskboard with a million finished jobs: claim cost, no-op throughput, the dashboard's
refresh and `taskboard status`, on an empty table, with 1,000,000 finished jobs, and after
`taskboard prune` (issues 11 and 12).

One fresh database goes through three states:

  (a) empty: just migrated;
  (b) 1,000,000 finished jobs (95% completed, 3% dead after 5 attempts, 2% cancelled), their
      times spread over the last 10 days with ids ascending in time, each with the attempts
      rows its workers would have left (retries, a few lost leases), inserted with set-based
      SQL and then VACUUM ANALYZE;
  (c) after `retention.prune` with the default ages (completed after a day, dead and
      cancelled after a week), as `taskboard prune` runs it; the dashboard and `status` are
      read once right after the prune, then VACUUM ANALYZE (autovacuum would start within a
      minute: the prune leaves far more dead rows than its threshold) and everything again.

In each state it measures the engine's CLAIM as a worker runs it (server time from
pg_stat_statements over many claims of 8 on 20,000 ready jobs, and EXPLAIN ANALYZE of the
generic plan), no-op throughput with 1 and 2 worker processes (as bench/throughput.py), the
dashboard's whole refresh (`read_board`: database time and client time) and the real
`taskboard status` command (wall time and database time). Every measurement starts from the
state itself: the rows it added are deleted and the tables vacuumed after it. In (b) and (c)
each throughput run is paired with one on an empty database of the same server, run just
before or after it (alternately), and the target is judged on the median of those pairs'
ratios: runs of a few seconds on a shared host drift by more than the 10% the issue allows.

    uv run --group bench python bench/big_table.py --runs 5 --throughput-jobs 50000 \
        > bench/results-big-table.md
    uv run --group bench python bench/big_table.py --quick     # 100k rows: plumbing only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from common import (
    BENCH_DIR,
    QUIET_MAX_WAIT,
    BenchServer,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    cpu_snapshot,
    cpu_used,
    environment_markdown,
    foreign_cores,
    foreign_mark,
    foreign_note,
    is_harness_query,
    log,
    median,
    percentile,
    running_workers,
    spread,
    targets_markdown,
    wait_for_quiet,
    watching_foreign_load,
)
from systems import TASKBOARD, TaskboardClient, runner_argv
from taskboard.core import sql
from taskboard.core.engine import leases
from taskboard.core.operations.retention import Pruned, Retention, prune
from taskboard.core.view.status import (
    ACTIVITY_WINDOW,
    GONE_AFTER_SECONDS,
    KEEP_STOPPED_SECONDS,
    read_board,
)
from throughput import JOBS as THROUGHPUT_JOBS
from throughput import QUICK_JOBS as THROUGHPUT_QUICK_JOBS
from throughput import _wait_drained

FINISHED = 1_000_000
QUICK_FINISHED = 100_000
SEED_CHUNK = 100_000
READY = 20_000          # ready jobs under the claim measurement
CLAIMS = 1_000          # claims of CLAIM_BATCH per round (8,000 of the 20,000 jobs)
QUICK_CLAIMS = 200
CLAIM_BATCH = 8
EXPLAINS = 10
REFRESHES = 50          # dashboard refreshes per round
QUICK_REFRESHES = 10
BOARD_PENDING = 2_000   # jobs waiting while the dashboard and status read the board
DASHBOARD_CLAIMS_LIMIT = 100  # the dashboard's (core/fleet/fleet.py); status uses 1,000
STATUS_RUNS = 5
QUICK_STATUS_RUNS = 2
REFRESH_TARGET_MS = 20.0
STATUS_TARGET_MS = 50.0
RATIO_TARGET = 0.10
MARK = "bench:remaining"
# Planning time counted too (pg_stat_statements only tracks it when asked, per session).
TRACK_PLANNING = "-c pg_stat_statements.track_planning=on"

STATE_LABELS = {
    "a": "(a) empty",
    "b": "(b) 1M finished",
    "c0": "(c) after prune, before VACUUM",
    "c": "(c) after prune",
}

# --- the finished history --------------------------------------------------------------

# One chunk of finished jobs and their attempts in one statement. `g` runs over the whole
# history (offset + 1 .. offset + n of total), oldest first, so ids ascend with time as in
# a real table; the newest job finished an hour ago. Shapes: completed 95% (94% on the first
# attempt, 5% on the second, 1% on the third), dead 3% (5 failed attempts), cancelled 2%
# (half before any claim, half while running). About 1 retried job in 60 lost its first
# lease (a worker killed): those attempts are what the dashboard's trouble panel lists.
SEED = """
WITH src AS (
    SELECT g, random() AS u, random() AS v, random() AS w,
           now() - interval '240 hours'
               + ((%(offset)s + g)::float8 / %(total)s) * interval '239 hours' AS created
      FROM generate_series(1, %(n)s) AS g
), shaped AS (
    SELECT g, created,
           CASE WHEN u < 0.95 THEN 'completed' WHEN u < 0.98 THEN 'dead' ELSE 'cancelled' END
               AS state,
           CASE WHEN v < 0.6 THEN 'email' WHEN v < 0.7 THEN 'billing' ELSE 'noop' END AS kind,
           w
      FROM src
), sized AS (
    SELECT *,
           CASE state WHEN 'completed' THEN CASE WHEN w < 0.94 THEN 1 WHEN w < 0.99 THEN 2
                                                 ELSE 3 END
                      WHEN 'dead' THEN 5
                      ELSE CASE WHEN w < 0.5 THEN 0 ELSE 1 END END AS tries
      FROM shaped
), jobs AS (
    INSERT INTO taskboard_jobs (kind, payload, queue, run_at, attempts, max_attempts,
                                claimed_by, claimed_at, completed_at, failed_at, cancelled_at,
                                last_error, created_at, claim_count)
    SELECT kind,
           CASE kind
               WHEN 'email' THEN jsonb_build_object(
                   'to', 'user' || g || '@example.com', 'subject', 'Your receipt ' || g,
                   'body', 'Thank you for your order. It ships tomorrow.')
               WHEN 'billing' THEN jsonb_build_object(
                   'customer', 'cus_' || g, 'amount', 1000 + g %% 9000, 'currency', 'usd')
               ELSE '{}'::jsonb END,
           'default',
           created + greatest(tries - 1, 0) * interval '30 seconds',
           tries, 5,
           CASE WHEN tries > 0 THEN 'worker-' || (g %% 4) END,
           CASE WHEN tries > 0
                THEN created + (tries - 1) * interval '30 seconds' + interval '5 ms' END,
           CASE WHEN state = 'completed'
                THEN created + (tries - 1) * interval '30 seconds' + interval '50 ms' END,
           CASE WHEN state = 'dead' THEN created + interval '121 seconds' END,
           CASE WHEN state = 'cancelled' THEN created + interval '2 seconds' END,
           CASE WHEN state = 'dead'
                THEN 'SMTPServerDisconnected: Connection unexpectedly closed' END,
           created, tries
      FROM sized
    RETURNING id, claim_count, claimed_by, created_at, completed_at, failed_at, cancelled_at
)
INSERT INTO taskboard_attempts (job_id, attempt, lease_token, worker_id, claimed_at, ended_at,
                                outcome, error, superseded_at, pickup_seconds, handler_seconds)
SELECT j.id, a, gen_random_uuid(), j.claimed_by,
       j.created_at + (a - 1) * interval '30 seconds' + interval '5 ms',
       j.created_at + (a - 1) * interval '30 seconds'
           + CASE WHEN a < j.claim_count OR j.failed_at IS NOT NULL THEN interval '1 second'
                  WHEN j.cancelled_at IS NOT NULL THEN interval '2 seconds'
                  ELSE interval '50 ms' END,
       CASE WHEN a < j.claim_count AND a = 1 AND j.id %% 60 = 0 THEN 'lease_lost'
            WHEN a < j.claim_count THEN 'failed'
            WHEN j.completed_at IS NOT NULL THEN 'completed'
            WHEN j.failed_at IS NOT NULL THEN 'failed'
            ELSE 'cancelled' END,
       CASE WHEN a < j.claim_count AND a = 1 AND j.id %% 60 = 0
                THEN 'lease expired: worker ' || j.claimed_by || ' stopped renewing'
            WHEN a < j.claim_count OR j.failed_at IS NOT NULL
                THEN 'SMTPServerDisconnected: Connection unexpectedly closed' END,
       CASE WHEN a < j.claim_count AND a = 1 AND j.id %% 60 = 0
            THEN j.created_at + interval '65 seconds' END,
       0.005,
       CASE WHEN a < j.claim_count AND a = 1 AND j.id %% 60 = 0 THEN NULL
            WHEN a < j.claim_count OR j.failed_at IS NOT NULL THEN 0.995
            WHEN j.cancelled_at IS NOT NULL THEN NULL
            ELSE 0.045 END
  FROM jobs j CROSS JOIN LATERAL generate_series(1, j.claim_count) AS a
"""

# `remaining` for the drain clock without a scan of finished rows: unleased unfinished rows
# are the partial "ready" index, leased rows are unfinished (a constraint says so).
REMAINING_BY_INDEX = (
    "SELECT (SELECT count(*) FROM taskboard_jobs WHERE lease_token IS NULL "
    "AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL) "
    "+ (SELECT count(*) FROM taskboard_jobs WHERE lease_token IS NOT NULL)"
)

# The dashboard's statements, told apart in pg_stat_statements by a phrase of each.
BOARD_STATEMENTS = {
    "JOB_COUNTS": "FROM taskboard_finished_counts WHERE state",
    "LIST_WORKERS": "FROM taskboard_workers WHERE stopped_at IS NULL",
    "LIST_CLAIMS": "LEFT JOIN taskboard_workers w",
    "LIST_TROUBLE": "AS detail FROM taskboard_attempts",
    "LIST_DEAD": "SELECT id AS job_id, kind, attempts",
    "ORPHAN_KINDS": "sum(c.n)::bigint AS waiting FROM taskboard_waiting_counts c",
    "BOARD_PAUSED_QUEUES": "FROM taskboard_waiting_counts c WHERE c.queue = q.name",
    "LIST_SCHEDULES": "FROM taskboard_schedules ORDER BY name",
    "RECENT_ACTIVITY": "WITHIN GROUP (ORDER BY pickup_seconds)",
}
# The claim's rows (a first claim with no ids to skip binds another type: two entries).
# The same statements with the parameters read_board gives them, for EXPLAIN.
BOARD_PARAMS: dict[str, dict[str, Any]] = {
    "JOB_COUNTS": {},
    "LIST_WORKERS": {"keep_stopped": KEEP_STOPPED_SECONDS, "gone_after": GONE_AFTER_SECONDS},
    "LIST_CLAIMS": {"limit": DASHBOARD_CLAIMS_LIMIT},
    "LIST_TROUBLE": {"limit": 50},
    "LIST_DEAD": {"limit": 50},
    "ORPHAN_KINDS": {"gone_after": GONE_AFTER_SECONDS},
    "BOARD_PAUSED_QUEUES": {},
    "LIST_SCHEDULES": {},
    "RECENT_ACTIVITY": {"window": ACTIVITY_WINDOW},
}
# A statement's plans are printed when, in some state, a call costs more than this.
PLAN_SHOWN_MS = 1.0
PLAN_SHOWN_BLOCKS = 100
CLAIM_PHRASE = "WITH fresh AS ( SELECT id, $"
COMPLETE_PHRASE = "WITH held AS ("


def norm(text: str) -> str:
    return " ".join(text.split())


def _summed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Several pg_stat_statements rows of one statement as one (stddev: the busiest's)."""
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in (
        "calls", "total_exec_time", "total_plan_time", "plans", "shared_blks_hit",
        "shared_blks_read", "shared_blks_dirtied")}
    out["stddev_exec_time"] = max(rows, key=lambda r: r["calls"])["stddev_exec_time"] \
        if rows else float("nan")
    return out


# --- the database under test -----------------------------------------------------------


class BigBoard:
    """The one database of the run, with the maintenance the harness does between runs."""

    def __init__(self, server: BenchServer, quick: bool) -> None:
        self.server = server
        self.quick = quick
        # State (a) is measured on a fresh database each time, as bench/throughput.py does:
        # emptied by DELETE and then analyzed, the tables' statistics say "empty" and the
        # generic plans cached for COMPLETE_MANY scan taskboard_attempts (see the README).
        self.fresh_each = False
        self._open()

    def _open(self) -> None:
        self.dbname, self.url = self.server.fresh_database("bigtable")
        self.admin = psycopg.connect(self.server.url, autocommit=True)
        self.conn = psycopg.connect(self.url, autocommit=True)
        row = self.admin.execute("SELECT oid FROM pg_database WHERE datname = %s",
                                 (self.dbname,)).fetchone()
        assert row is not None
        self.dbid = int(row[0])

    def close(self) -> None:
        self.conn.close()
        self.admin.close()
        self.server.drop_database(self.dbname)

    async def migrate(self) -> None:
        client = TaskboardClient(self.url)
        await client.open()  # migrates
        await client.close()

    async def reset(self, watermark: int) -> float:
        """Back to the state after a measurement: `restore`, or in state (a) a new database."""
        if not self.fresh_each:
            return self.restore(watermark)
        t0 = time.monotonic()
        self.close()
        self._open()
        await self.migrate()
        return time.monotonic() - t0

    # -- reads --

    def scalar(self, query: str, params: Any = None) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return row[0] if row else None

    def watermark(self) -> int:
        return int(self.scalar("SELECT coalesce(max(id), 0) FROM taskboard_jobs"))

    def trigger_counts(self) -> dict[str, int]:
        """Finished jobs by state and waiting ones, as the count triggers keep them."""
        rows = self.conn.execute("SELECT state, sum(n)::bigint FROM taskboard_finished_counts "
                                 "GROUP BY state UNION ALL SELECT 'waiting', sum(n)::bigint "
                                 "FROM taskboard_waiting_counts").fetchall()
        return {s: int(n) for s, n in rows if n}

    def scanned_counts(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT coalesce(taskboard_finished_state(completed_at, failed_at, cancelled_at),"
            " CASE WHEN lease_token IS NULL THEN 'waiting' END) AS s, "
            "count(*) FROM taskboard_jobs GROUP BY 1").fetchall()
        return {s: int(n) for s, n in rows if s is not None}

    def sizes(self) -> dict[str, Any]:
        return {
            "jobs_rows": int(self.scalar("SELECT count(*) FROM taskboard_jobs")),
            "attempts_rows": int(self.scalar("SELECT count(*) FROM taskboard_attempts")),
            "trouble_rows": int(self.scalar(
                "SELECT count(*) FROM taskboard_attempts WHERE outcome IN "
                "('completion_rejected', 'lease_lost') OR renewal_failed_at IS NOT NULL")),
            "jobs_mb": int(self.scalar("SELECT pg_total_relation_size('taskboard_jobs')")) / 2**20,
            "attempts_mb": int(self.scalar(
                "SELECT pg_total_relation_size('taskboard_attempts')")) / 2**20,
            "counts": self.trigger_counts(),
        }

    def autovacuum(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT relname, autovacuum_count + autoanalyze_count FROM pg_stat_user_tables "
            "WHERE relname IN ('taskboard_jobs', 'taskboard_attempts')").fetchall()
        return {r: int(n) for r, n in rows}

    def db_time(self) -> tuple[float, int]:
        """Execution + planning ms and calls of every statement this database has run."""
        row = self.admin.execute(
            "SELECT coalesce(sum(total_exec_time + total_plan_time), 0), "
            "coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = %s",
            (self.dbid,)).fetchone()
        assert row is not None
        return float(row[0]), int(row[1])

    def statement_rows(self) -> list[dict[str, Any]]:
        cur = self.admin.execute(
            "SELECT query, calls, total_exec_time, stddev_exec_time, total_plan_time, plans, "
            "shared_blks_hit, shared_blks_read, shared_blks_dirtied "
            "FROM pg_stat_statements WHERE dbid = %s ORDER BY calls DESC", (self.dbid,))
        names = [d.name for d in cur.description or ()]
        return [dict(zip(names, row, strict=True)) | {"query": norm(row[0])}
                for row in cur.fetchall()]

    # -- writes --

    def restore(self, watermark: int) -> float:
        """Back to the state: rows added since `watermark` deleted, workers gone, vacuumed.

        The DELETE runs the count trigger like any other, so the counters come back too.
        """
        t0 = time.monotonic()
        self.conn.execute("DELETE FROM taskboard_jobs WHERE id > %s", (watermark,))
        self.conn.execute("DELETE FROM taskboard_workers")
        self.conn.execute("VACUUM (ANALYZE) taskboard_jobs, taskboard_attempts, "
                          "taskboard_workers, taskboard_finished_counts, "
                          "taskboard_waiting_counts")
        return time.monotonic() - t0

    def seed(self, total: int) -> dict[str, float]:
        """`total` finished jobs with their attempts, in chunks; then VACUUM ANALYZE."""
        self.conn.execute("SELECT setseed(0.42)")
        t0 = time.monotonic()
        done = 0
        while done < total:
            n = min(SEED_CHUNK, total - done)
            self.conn.execute(SEED, {"offset": done, "total": total, "n": n})
            done += n
            log(f"  seeded {done:,} of {total:,} finished jobs "
                f"({time.monotonic() - t0:.0f}s)")
        inserted = time.monotonic() - t0
        t1 = time.monotonic()
        self.conn.execute("VACUUM (ANALYZE)")
        vacuumed = time.monotonic() - t1
        return {"insert_s": inserted, "vacuum_s": vacuumed}

    def explain_board(self) -> dict[str, list[str]]:
        """EXPLAIN (ANALYZE, BUFFERS) of each of the dashboard's reads, as read_board runs
        them (custom plans with its parameters)."""
        out = {}
        for name, params in BOARD_PARAMS.items():
            query = getattr(sql, name)
            rows = self.conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + query,
                                     params or None).fetchall()
            out[name] = [r[0] for r in rows]
        return out

    def checkpoint(self) -> None:
        """Write out dirty buffers now, not during the next timed phase."""
        self.conn.execute("CHECKPOINT")


# --- phases and their load ---------------------------------------------------------------


@dataclass
class Phase:
    state: str
    name: str
    seconds: float
    load_start: float
    load_end: float
    other_cores: float


@dataclass
class Run:
    """Everything one run of this script measured."""

    phases: list[Phase] = field(default_factory=list)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    seed: dict[str, float] = field(default_factory=dict)
    prune: dict[str, Any] = field(default_factory=dict)


class timed_phase:
    """Records a phase's duration, the load average and the other processes' cores."""

    def __init__(self, run: Run, state: str, name: str) -> None:
        self.run, self.state, self.name = run, state, name

    def __enter__(self) -> timed_phase:
        log(f"{STATE_LABELS[self.state]}: {self.name}")
        self.t0 = time.monotonic()
        self.load0 = os.getloadavg()[0]
        self.mark = foreign_mark()
        return self

    def __exit__(self, *exc: object) -> None:
        self.run.phases.append(Phase(self.state, self.name, time.monotonic() - self.t0,
                                     self.load0, os.getloadavg()[0],
                                     foreign_cores(self.mark)))


# --- claim cost --------------------------------------------------------------------------


def _positional(query: str) -> tuple[str, list[str]]:
    """psycopg's %(name)s placeholders as $n, for a PREPARE of the same text."""
    names: list[str] = []

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", sub, query).replace("%%", "%"), names


CLAIM_TYPES = {"worker": "text", "limit": "integer", "lease": "float8", "queues": "text[]",
               "kinds": "text[]", "skip": "bigint[]", "db_kinds": "text[]", "db_limit": "integer"}
CLAIM_ARGS = {"worker": "'explain'", "limit": str(CLAIM_BATCH), "lease": "60",
              "queues": "'{default}'", "kinds": "'{noop}'", "skip": "'{}'", "db_kinds": "'{}'",
              "db_limit": "0"}


def explain_generic(board: BigBoard, repeats: int) -> tuple[list[float], list[str]]:
    """EXPLAIN (ANALYZE, BUFFERS) of CLAIM prepared with a forced generic plan, rolled back."""
    text, names = _positional(sql.CLAIM)
    times: list[float] = []
    plan: list[str] = []
    with psycopg.connect(board.url, autocommit=True) as conn:
        conn.execute(f"PREPARE bench_claim ({', '.join(CLAIM_TYPES[n] for n in names)}) AS "
                     + text)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        execute = f"EXECUTE bench_claim ({', '.join(CLAIM_ARGS[n] for n in names)})"
        for _ in range(repeats):
            with conn.transaction(force_rollback=True):
                plan = [r[0] for r in conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, TIMING) " + execute).fetchall()]
            times.append(next(float(line.split()[2]) for line in plan
                              if line.startswith("Execution Time")))
    return times, plan


async def claim_round(board: BigBoard, claims: int, plan_cache_mode: str | None = None,
                      explain: bool = True) -> dict[str, Any]:
    """`claims` claims of 8 on READY ready jobs, as a worker's engine connection runs them.

    The first claim alone, then the worker's steady state: each group's completion and the
    next claim pipelined (`complete_many_and_claim`), on one connection that psycopg
    prepares the statements on after 5 runs. Server time from pg_stat_statements.
    """
    watermark = board.watermark()
    client = TaskboardClient(board.url)
    await client.open()
    await client.enqueue_noops(READY)
    await client.close()
    options = TRACK_PLANNING + (f" -c plan_cache_mode={plan_cache_mode}"
                                if plan_cache_mode else "")
    conn = await psycopg.AsyncConnection.connect(board.url, autocommit=True, options=options)
    board.server.reset_statements()
    params = {"worker_id": "bench-claim", "limit": CLAIM_BATCH, "lease_seconds": 60.0,
              "queues": ["default"], "kinds": ["noop"]}
    walls = []
    got = await leases.claim(conn, **params)
    for _ in range(claims - 1):
        t = time.perf_counter()
        _, got = await leases.complete_many_and_claim(conn, [j.lease for j in got], **params)
        walls.append(1000 * (time.perf_counter() - t))
        if len(got) < CLAIM_BATCH:
            raise RuntimeError(f"a claim took {len(got)} jobs, not {CLAIM_BATCH}")
    await leases.complete_many(conn, [j.lease for j in got])
    rows = board.statement_rows()
    cur = await conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                             "WHERE statement LIKE '%%WITH fresh AS (%%'")
    plans = await cur.fetchone()
    await conn.close()
    claim = _summed([r for r in rows if CLAIM_PHRASE in r["query"]])
    if not claim["calls"]:
        raise RuntimeError("no CLAIM in pg_stat_statements: "
                           + repr([(r["calls"], r["query"][:100]) for r in rows]))
    complete = _summed([r for r in rows if COMPLETE_PHRASE in r["query"]])
    explain_ms, plan = explain_generic(board, EXPLAINS) if explain else ([], [])
    await board.reset(watermark)
    calls = claim["calls"]
    return {
        "calls": calls,
        "exec_ms": claim["total_exec_time"] / calls,
        "server_ms": (claim["total_exec_time"] + claim["total_plan_time"]) / calls,
        "stddev_ms": claim["stddev_exec_time"],
        "plan_ms": claim["total_plan_time"] / calls,
        "hit": claim["shared_blks_hit"] / calls,
        "read": claim["shared_blks_read"] / calls,
        "dirtied": claim["shared_blks_dirtied"] / calls,
        "complete_ms": (complete["total_exec_time"] / complete["calls"] if complete["calls"]
                        else float("nan")),
        "generic_plans": int(plans[0]) if plans else -1,
        "custom_plans": int(plans[1]) if plans else -1,
        "roundtrip_ms": median(walls),
        "explain_ms": median(explain_ms),
        "plan": plan,
    }


# --- throughput ----------------------------------------------------------------------------


class _Client(TaskboardClient):
    remaining_sql = REMAINING_BY_INDEX


async def drain_run(board: BigBoard, workers: int, jobs: int) -> dict[str, float]:
    """One timed drain of `jobs` no-op jobs by `workers` processes (bench/throughput.py's
    one_run, on this database instead of a fresh one)."""
    server = board.server
    watermark = board.watermark()
    before = board.trigger_counts()
    client = _Client(board.url)
    await client.open()
    client.remaining_sql = f"/* {MARK} */ " + client.remaining_sql
    procs = [WorkerProcess(f"taskboard-big-tp{workers}-w{i}",
                           runner_argv(TASKBOARD, board.url, f"big-w{i}"), StartBoard())
             for i in range(workers)]
    try:
        async with running_workers(procs):
            server.reset_statements()
            await client.enqueue_noops(jobs)
            # CPU from the enqueue's commit, as the clock (throughput.one_run does the same).
            pg_before = cpu_snapshot(server.postgres_pids())
            w_before = sum(p.cpu_seconds() for p in procs)
            t0 = time.monotonic()
            mark = foreign_mark()
            t1 = await _wait_drained(client, jobs)
            foreign = foreign_cores(mark)
            w_cpu = sum(p.cpu_seconds() for p in procs) - w_before
            pg_cpu = cpu_used(pg_before, cpu_snapshot(server.postgres_pids()))
            statements = [s for s in server.statements(board.dbname)
                          if not is_harness_query(s.query, client.remaining_sql)]
    finally:
        await client.close()
    await board.reset(watermark)
    if board.trigger_counts() != before:
        # A worker's janitor pruned the history (its first pass comes 30-60 s after start).
        log(f"  WARNING: finished rows changed during the run: {before} -> "
            f"{board.trigger_counts()}")
    elapsed = t1 - t0
    return {
        "rate": jobs / elapsed,
        "seconds": elapsed,
        "statements_per_job": sum(s.calls for s in statements) / jobs,
        "worker_cpu_ms": 1000 * w_cpu / jobs,
        "pg_cpu_ms": 1000 * pg_cpu / jobs,
        "foreign": foreign,
    }


# --- the dashboard and status --------------------------------------------------------------


async def refresh_round(board: BigBoard, n: int) -> list[tuple[float, float]]:
    """`n` dashboard refreshes on one long-lived connection: (database ms, client ms) each."""
    out = []
    conn = await psycopg.AsyncConnection.connect(board.url, autocommit=True,
                                                 options=TRACK_PLANNING)
    try:
        for _ in range(n):
            db0, _ = board.db_time()
            t = time.perf_counter()
            await read_board(conn, database=board.dbname, mode="attached",
                             claims_limit=DASHBOARD_CLAIMS_LIMIT)
            wall = 1000 * (time.perf_counter() - t)
            db1, _ = board.db_time()
            out.append((db1 - db0, wall))
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return out


def _taskboard_script() -> str:
    script = Path(sys.executable).parent / "taskboard"
    return str(script) if script.exists() else "taskboard"


def status_runs(board: BigBoard, n: int) -> dict[str, Any]:
    """The real `taskboard status`: `uv run taskboard status` and the installed script."""
    env = {**os.environ, "TASKBOARD_DATABASE_URL": board.url, "PGOPTIONS": TRACK_PLANNING}
    uv = shutil.which("uv") or "uv"
    commands = {"uv": [uv, "run", "taskboard", "status"],
                "script": [_taskboard_script(), "status"]}
    out: dict[str, Any] = {"uv_wall": [], "script_wall": [], "db_ms": [], "statements": [],
                           "counts_line": ""}
    for label, argv in commands.items():
        for _ in range(n):
            db0, calls0 = board.db_time()
            t = time.perf_counter()
            proc = subprocess.run(argv, env=env, cwd=BENCH_DIR.parent, capture_output=True,
                                  text=True, check=False, timeout=120)
            wall = 1000 * (time.perf_counter() - t)
            db1, calls1 = board.db_time()
            if proc.returncode != 0:
                raise RuntimeError(f"taskboard status exited {proc.returncode}: "
                                   f"{proc.stderr.strip()[-500:]}")
            out[f"{label}_wall"].append(wall)
            out["db_ms"].append(db1 - db0)
            out["statements"].append(calls1 - calls0)
            out["counts_line"] = next((line.strip() for line in proc.stdout.splitlines()
                                       if line.startswith("jobs:")), "?")
    return out


def by_statement(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per call: exec + plan ms and shared buffers of each of the dashboard's statements."""
    out = {}
    for name, phrase in BOARD_STATEMENTS.items():
        row = next((r for r in rows if phrase in r["query"]), None)
        if row is None or not row["calls"]:
            continue
        calls = row["calls"]
        out[name] = {"ms": (row["total_exec_time"] + row["total_plan_time"]) / calls,
                     "blks": (row["shared_blks_hit"] + row["shared_blks_read"]) / calls}
    return out


async def board_phase(run: Run, board: BigBoard, state: str, rounds: int, refreshes: int,
                      status_n: int) -> None:
    """The dashboard's refresh and `taskboard status`, with BOARD_PENDING jobs waiting."""
    watermark = board.watermark()
    client = TaskboardClient(board.url)
    await client.open()
    await client.enqueue_noops(BOARD_PENDING)
    await client.close()
    result = run.states.setdefault(state, {})
    with timed_phase(run, state, f"dashboard refresh, {rounds} x {refreshes}"):
        board.server.reset_statements()
        samples = []
        for _ in range(rounds):
            samples += await refresh_round(board, refreshes)
        result["refresh"] = samples
        result["refresh_statements"] = by_statement(board.statement_rows())
        result["board_plans"] = board.explain_board()
    with timed_phase(run, state, f"taskboard status, {status_n} x 2 commands"):
        result["status"] = status_runs(board, status_n)
    result["vacuum_after_s"] = await board.reset(watermark)


# --- prune ---------------------------------------------------------------------------------


async def prune_phase(run: Run, board: BigBoard) -> None:
    """`retention.prune` with the default ages, as `taskboard prune` runs it."""
    attempts_before = int(board.scalar("SELECT count(*) FROM taskboard_attempts"))
    conn = await psycopg.AsyncConnection.connect(board.url, autocommit=True)
    batch_s: list[float] = []
    last = [time.perf_counter()]

    def progress(done: Pruned) -> None:
        now = time.perf_counter()
        batch_s.append(now - last[0])
        last[0] = now
        if done.batches % 200 == 0:
            log(f"  pruned {done.jobs:,} jobs in {done.batches} batches")

    with timed_phase(run, "c0", "taskboard prune (retention.prune, default ages)"):
        t0 = time.perf_counter()
        result = await prune(conn, Retention(), progress=progress)
        elapsed = time.perf_counter() - t0
    await conn.close()
    attempts_after = int(board.scalar("SELECT count(*) FROM taskboard_attempts"))
    run.prune = {
        "jobs": result.jobs, "batches": result.batches, "workers": result.workers,
        "skipped": result.skipped, "seconds": elapsed,
        "attempts": attempts_before - attempts_after,
        "batch_ms": [1000 * s for s in batch_s],
    }
    log(f"  pruned {result.jobs:,} jobs ({attempts_before - attempts_after:,} attempts) in "
        f"{result.batches} batches, {elapsed:.1f}s")


# --- one state -----------------------------------------------------------------------------


async def measure_state(run: Run, board: BigBoard, state: str, args: argparse.Namespace,
                        ref: BigBoard | None = None) -> None:
    """Every measurement of one state; with `ref` (an empty database, new for each run),
    each throughput run is paired with a run there, interleaved, so the ratio to the empty
    table compares runs minutes apart at most instead of a whole benchmark apart."""
    quick = args.quick
    runs = 1 if quick else args.runs
    max_wait = 10.0 if quick else QUIET_MAX_WAIT
    result = run.states.setdefault(state, {})
    board.checkpoint()
    result["sizes"] = board.sizes()
    result["autovacuum_before"] = board.autovacuum()

    claims = QUICK_CLAIMS if quick else CLAIMS
    result["claims"] = []
    for i in range(runs):
        await wait_for_quiet(max_wait)
        with timed_phase(run, state, f"claim cost, round {i + 1}/{runs} ({claims} claims, "
                                     "then again with plan_cache_mode auto)"):
            # Generic plans forced, as the engine's session sets (sql.ENGINE_SESSION).
            r = await claim_round(board, claims, "force_generic_plan")
            r["auto"] = await claim_round(board, claims, None, explain=False)
        log(f"  CLAIM {r['exec_ms']:.3f} ms + planning {r['plan_ms']:.3f} ms "
            f"(pg_stat_statements; generic/custom plans {r['generic_plans']}/"
            f"{r['custom_plans']}), generic plan "
            f"{r['explain_ms']:.3f} ms (EXPLAIN)")
        result["claims"].append(r)

    await board_phase(run, board, state, runs, QUICK_REFRESHES if quick else REFRESHES,
                      QUICK_STATUS_RUNS if quick else STATUS_RUNS)
    refresh = result["refresh"]
    log(f"  refresh: database {median([d for d, _ in refresh]):.2f} ms, client "
        f"{median([w for _, w in refresh]):.2f} ms; status database "
        f"{median(result['status']['db_ms']):.2f} ms")

    jobs = throughput_jobs(args)
    result["throughput"] = {}
    result["throughput_ref"] = {}
    for workers in (1, 2):
        rs: list[dict[str, float]] = []
        refs: list[dict[str, float]] = []
        for i in range(runs):
            # Alternate which goes first, so a drift of the host favours neither side.
            order = [(board, rs), (ref, refs)] if i % 2 == 0 else [(ref, refs), (board, rs)]
            for target, out in order:
                if target is None:
                    continue
                where = "empty reference" if target is ref else state
                await wait_for_quiet(max_wait)
                with timed_phase(run, state, f"no-op throughput, {workers} worker(s), "
                                             f"run {i + 1}/{runs}, {where}"):
                    r = await drain_run(target, workers, jobs)
                log(f"  {where}: {r['rate']:,.0f} jobs/s in {r['seconds']:.1f}s")
                out.append(r)
        result["throughput"][workers] = rs
        if ref is not None:
            result["throughput_ref"][workers] = refs
    result["autovacuum_after"] = board.autovacuum()
    result["trigger_counts"] = board.trigger_counts()
    result["scanned_counts"] = board.scanned_counts()


async def run_states(server: BenchServer, args: argparse.Namespace) -> tuple[Run, dict[str, str]]:
    run = Run()
    total = QUICK_FINISHED if args.quick else FINISHED
    STATE_LABELS["b"] = ("(b) 1M finished" if total == 1_000_000
                         else f"(b) {total:,} finished")
    board = BigBoard(server, args.quick)
    try:
        await board.migrate()
        board.fresh_each = True
        await measure_state(run, board, "a", args)
        board.fresh_each = False

        log(f"seeding {total:,} finished jobs")
        with timed_phase(run, "b", f"seed {total:,} finished jobs + VACUUM ANALYZE"):
            run.seed = board.seed(total)
        run.seed["total"] = total
        ref = BigBoard(server, args.quick)
        ref.fresh_each = True
        try:
            await ref.migrate()
            await measure_state(run, board, "b", args, ref)
            await prune_phase(run, board)
            # Right after the prune, before any vacuum: what an operator sees at once.
            board.checkpoint()
            run.states["c0"] = {"sizes": board.sizes()}
            await board_phase(run, board, "c0", 1,
                              QUICK_REFRESHES if args.quick else REFRESHES,
                              QUICK_STATUS_RUNS if args.quick else STATUS_RUNS)
            # board_phase's restore vacuumed the pruned rows away: that is the VACUUM ANALYZE.
            run.prune["vacuum_s"] = run.states["c0"]["vacuum_after_s"]
            await measure_state(run, board, "c", args, ref)
        finally:
            ref.close()

        settings = extra_settings(board)
    finally:
        board.close()
    return run, settings


def extra_settings(board: BigBoard) -> dict[str, str]:
    out = {}
    for name in ("autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor",
                 "work_mem", "effective_cache_size", "random_page_cost", "plan_cache_mode",
                 "max_wal_size", "checkpoint_timeout", "jit"):
        out[name] = str(board.scalar(f"SHOW {name}"))
    return out


# --- report ----------------------------------------------------------------------------------


def _fmt_ratio(value: float) -> str:
    return f"{value:.2f}x" if value == value else "n/a"


def claim_ms(state: dict[str, Any], key: str = "server_ms") -> list[float]:
    """CLAIM's server time per call: execution + planning (what the worker waits for)."""
    return [c[key] for c in state["claims"]]


def rates(state: dict[str, Any], workers: int, key: str = "throughput") -> list[float]:
    return [r["rate"] for r in state[key][workers]]


def paired_ratios(state: dict[str, Any], workers: int) -> list[float]:
    """Each run's rate over its interleaved empty-table run's."""
    return [r / base for r, base in zip(rates(state, workers),
                                        rates(state, workers, "throughput_ref"), strict=True)]


def throughput_jobs(args: argparse.Namespace) -> int:
    # run_all.py's parser has no --throughput-jobs: its runs use the default.
    return THROUGHPUT_QUICK_JOBS if args.quick else getattr(args, "throughput_jobs",
                                                              THROUGHPUT_JOBS)


def refresh_db(state: dict[str, Any]) -> list[float]:
    return [d for d, _ in state["refresh"]]


def sections(run: Run, args: argparse.Namespace) -> list[Section]:
    st = run.states
    order = ["a", "b", "c"]
    all_states = ["a", "b", "c0", "c"]
    total = run.seed.get("total", 0)

    # Headline and targets.
    head = Section(
        "Headline: the three states",
        ["state", "finished jobs", "CLAIM server ms (execution + planning)", "no-op jobs/s, 1 worker",
         "no-op jobs/s, 2 workers", "dashboard refresh, database ms median / p95",
         "`taskboard status`, database ms", "`taskboard status`, wall ms"],
    )
    for key in all_states:
        s = st[key]
        counts = s["sizes"]["counts"]
        finished = sum(counts.values())
        db = refresh_db(s)
        head.rows.append([
            STATE_LABELS[key], f"{finished:,}",
            spread(claim_ms(s), "{:.3f}") if "claims" in s else "-",
            spread(rates(s, 1)) if "throughput" in s else "-",
            spread(rates(s, 2)) if "throughput" in s else "-",
            f"{median(db):.2f} / {percentile(db, 95):.2f}",
            spread(s["status"]["db_ms"], "{:.1f}"),
            spread(s["status"]["script_wall"], "{:,.0f}"),
        ])
    head.notes += [
        "Median (min-max) over runs unless a column says otherwise. CLAIM server ms: "
        "pg_stat_statements execution + planning time per call of the engine's CLAIM over "
        f"{QUICK_CLAIMS if args.quick else CLAIMS:,} claims of 8 per run on {READY:,} ready "
        "jobs, as a worker's engine connection runs it (see the claim table).",
        "`taskboard status` wall ms: the installed console script (`.venv/bin/taskboard "
        "status`), which is Python start-up and imports plus the reads; `uv run taskboard "
        "status` is in the status table.",
    ]
    head.targets = targets(run)

    # States.
    states = Section(
        "The states",
        ["state", "completed / dead / cancelled", "job rows", "attempts rows",
         "trouble attempts", "taskboard_jobs MB", "taskboard_attempts MB",
         "trigger counts = full scan (after the state's runs)"],
    )
    for key in all_states:
        s = st[key]
        z = s["sizes"]
        c = z["counts"]
        check = "-"
        if "scanned_counts" in s:
            check = "yes" if s["trigger_counts"] == s["scanned_counts"] else (
                f"NO: trigger {s['trigger_counts']} vs scan {s['scanned_counts']}")
        states.rows.append([
            STATE_LABELS[key],
            f"{c.get('completed', 0):,} / {c.get('dead', 0):,} / {c.get('cancelled', 0):,}",
            f"{z['jobs_rows']:,}", f"{z['attempts_rows']:,}", f"{z['trouble_rows']:,}",
            f"{z['jobs_mb']:.0f}", f"{z['attempts_mb']:.0f}", check,
        ])
    seed = run.seed
    states.notes += [
        f"Seeding (b): {total:,} finished jobs and their attempts in {total // SEED_CHUNK or 1} "
        f"set-based INSERT statements of {SEED_CHUNK:,} jobs (one CTE each: jobs, then their "
        f"attempts) took {seed['insert_s']:.1f} s ({total / seed['insert_s']:,.0f} jobs/s, "
        f"count trigger included), then VACUUM ANALYZE {seed['vacuum_s']:.1f} s.",
        "History shape: 95% completed (94% first try, 5% second, 1% third), 3% dead after 5 "
        "failed attempts, 2% cancelled (half before a claim, half while running); kinds 60% "
        "email, 10% billing, 30% noop with small JSON payloads; times spread evenly over the "
        "last 10 days (the newest an hour old), ids ascending with time; one retried job in "
        "60 lost its first lease (the trouble rows).",
        "Between measurements in (b) and (c) the rows a measurement added are deleted and the "
        "tables vacuumed and analyzed, so each starts from the state itself; in (a) each "
        "measurement gets a new database, as bench/throughput.py does (a table emptied by "
        "DELETE and analyzed empty is another state: see bench/README.md). A CHECKPOINT "
        "starts each state. Each measurement in (b) also checks that no worker's janitor pruned the "
        "history meanwhile (its first pass comes 30-60 s after a worker starts; a run takes "
        "under 15 s).",
        "Autovacuum/autoanalyze runs on taskboard_jobs + taskboard_attempts during each "
        "state: " + ", ".join(
            f"{STATE_LABELS[k]} {sum(st[k]['autovacuum_after'].values()) - sum(st[k]['autovacuum_before'].values())}"
            for k in ("b", "c")) + " ((a): a new database per measurement).",
    ]

    # Prune.
    p = run.prune
    pr = Section(
        "`taskboard prune` from (b) to (c): retention.prune with the default ages",
        ["jobs deleted", "attempts deleted (cascade)", "batches of 500", "seconds",
         "jobs/s", "jobs + attempts rows/s", "batch ms median / p95 / max",
         "VACUUM ANALYZE afterwards, s"],
        [[f"{p['jobs']:,}", f"{p['attempts']:,}", f"{p['batches']:,}", f"{p['seconds']:.1f}",
          f"{p['jobs'] / p['seconds']:,.0f}",
          f"{(p['jobs'] + p['attempts']) / p['seconds']:,.0f}",
          f"{median(p['batch_ms']):.1f} / {percentile(p['batch_ms'], 95):.1f} / "
          f"{max(p['batch_ms']):.1f}",
          f"{p.get('vacuum_s', float('nan')):.1f}"]],
    )
    pr.notes += [
        "Default ages: completed after 1 day, dead and cancelled after 7 days (Retention()); "
        "one short transaction per batch (advisory lock + taskboard_prune_finished), the "
        "attempts go by ON DELETE CASCADE, the count trigger takes the deleted rows off.",
        "Nothing else ran meanwhile (no workers).",
    ]

    # Claim.
    cl = Section(
        f"Claim cost: the engine's CLAIM of {CLAIM_BATCH} on {READY:,} ready jobs",
        ["state", "CLAIM server ms: execution + planning", "execution ms (mean_exec_time)",
         "stddev ms", "planning ms/call", "shared buffers hit / read / dirtied per claim",
         "plans: generic / custom", "generic plan, EXPLAIN ANALYZE ms",
         "complete 8 + claim 8 round trip, client ms", "COMPLETE_MANY server ms",
         "plan_cache_mode auto: CLAIM execution + planning ms"],
    )
    for key in order:
        cs = st[key]["claims"]
        cl.rows.append([
            STATE_LABELS[key],
            spread([c["server_ms"] for c in cs], "{:.3f}"),
            spread([c["exec_ms"] for c in cs], "{:.3f}"),
            spread([c["stddev_ms"] for c in cs], "{:.3f}"),
            spread([c["plan_ms"] for c in cs], "{:.4f}"),
            f"{median([c['hit'] for c in cs]):.0f} / {median([c['read'] for c in cs]):.1f} / "
            f"{median([c['dirtied'] for c in cs]):.1f}",
            " ; ".join(f"{c['generic_plans']} / {c['custom_plans']}" for c in cs),
            spread([c["explain_ms"] for c in cs], "{:.3f}"),
            spread([c["roundtrip_ms"] for c in cs], "{:.3f}"),
            spread([c["complete_ms"] for c in cs], "{:.3f}"),
            spread([c["auto"]["server_ms"] for c in cs], "{:.3f}"),
        ])
    n_claims = QUICK_CLAIMS if args.quick else CLAIMS
    cl.notes += [
        f"Per run: {READY:,} no-op jobs enqueued, then on one autocommit connection the "
        "worker's own calls: `leases.claim` once, then `leases.complete_many_and_claim` "
        f"{n_claims - 1:,} times (each group's completion and the next claim of 8, "
        "pipelined, as the worker's steady state). psycopg prepares a statement after 5 "
        "runs; with plan_cache_mode=force_generic_plan, as the engine's session sets it "
        "(sql.ENGINE_SESSION), every run after that uses the cached generic plan: the "
        "plans column is pg_prepared_statements' count for the CLAIM per run.",
        "CLAIM server ms is pg_stat_statements mean_exec_time of CLAIM over those calls "
        "(planning separate, with track_planning on); buffers are pg_stat_statements' "
        f"shared blocks per call. The EXPLAIN column: the same statement PREPAREd with "
        f"plan_cache_mode=force_generic_plan, EXPLAIN (ANALYZE, BUFFERS) x {EXPLAINS}, "
        "rolled back, median execution time (instrumentation adds to it).",
        "Last column: each run repeated on a connection with plan_cache_mode auto (the "
        "server's default, without the engine's session settings): PostgreSQL then "
        "chooses custom plans, re-planned on every call.",
    ]

    # Throughput.
    jobs = throughput_jobs(args)
    tp = Section(
        f"No-op processing rate ({jobs:,} jobs per run)",
        ["state", "workers", "jobs/s", "seconds", "statements/job", "worker CPU ms/job",
         "PostgreSQL CPU ms/job", "other load, cores"],
    )
    rows_of = [(key, "throughput", STATE_LABELS[key]) for key in order]
    for key in ("b", "c"):
        if st.get(key, {}).get("throughput_ref"):
            rows_of.append((key, "throughput_ref",
                            f"(a) empty, interleaved with {STATE_LABELS[key]}"))
    for key, which, label in rows_of:
        for workers in (1, 2):
            rs = st[key][which][workers]
            tp.rows.append([
                label, str(workers), spread([r["rate"] for r in rs]),
                spread([r["seconds"] for r in rs], "{:.1f}"),
                spread([r["statements_per_job"] for r in rs], "{:.2f}"),
                spread([r["worker_cpu_ms"] for r in rs], "{:.2f}"),
                spread([r["pg_cpu_ms"] for r in rs], "{:.2f}"),
                spread([r["foreign"] for r in rs], "{:.2f}"),
            ])
    tp.notes += [
        "bench/throughput.py's run on this database: worker processes started and settled, "
        f"{jobs:,} no-op jobs enqueued in one batch, timed from the enqueue's commit to the "
        "database showing none unfinished (counted from the partial indexes, not a scan). "
        "Taskboard worker (bench/runners/taskboard_runner.py): lease 60 s, pool 10, "
        "concurrency at its default (100 no-op jobs at once).",
    ]

    # Refresh.
    rf = Section(
        f"The dashboard's refresh (`read_board`, one pipeline of {len(BOARD_STATEMENTS)} reads)",
        ["state", "refreshes", "database ms median", "p95", "max", "first",
         "client ms median (unix socket)", "client p95", "statements / refresh"],
    )
    for key in all_states:
        s = st[key]
        db = [d for d, _ in s["refresh"]]
        wall = [w for _, w in s["refresh"]]
        rf.rows.append([
            STATE_LABELS[key], str(len(db)), f"{median(db):.2f}", f"{percentile(db, 95):.2f}",
            f"{max(db):.2f}", f"{db[0]:.2f}", f"{median(wall):.2f}",
            f"{percentile(wall, 95):.2f}", str(len(BOARD_STATEMENTS)),
        ])
    rf.notes += [
        f"{BOARD_PENDING:,} jobs pending on the board, no workers; claims_limit "
        f"{DASHBOARD_CLAIMS_LIMIT} as the dashboard uses; one long-lived connection (psycopg "
        "prepares each statement after 5 refreshes), 20 ms apart.",
        "Database ms per refresh: the change in the sum of total_exec_time + total_plan_time "
        "over this database's pg_stat_statements rows across the refresh (track_planning on "
        "for the session; read from another database, so the reading is not counted). "
        "Client ms: wall time of the `read_board` call, Python decoding included.",
    ]

    bs = Section(
        "The dashboard's refresh by statement: database ms per call (shared buffers per call)",
        ["statement", *(STATE_LABELS[k] for k in all_states)],
    )
    for name in BOARD_STATEMENTS:
        cells = []
        for key in all_states:
            v = st[key]["refresh_statements"].get(name)
            cells.append(f"{v['ms']:.3f} ({v['blks']:.0f})" if v else "n/a")
        bs.rows.append([name, *cells])

    # Status.
    ss = Section(
        "`taskboard status` (the real command, TASKBOARD_DATABASE_URL set)",
        ["state", "runs", "`uv run taskboard status` wall ms", "installed script wall ms",
         "database ms", "statements", "its counts line"],
    )
    for key in all_states:
        s = st[key]["status"]
        ss.rows.append([
            STATE_LABELS[key], str(len(s["script_wall"])), spread(s["uv_wall"], "{:,.0f}"),
            spread(s["script_wall"], "{:,.0f}"), spread(s["db_ms"], "{:.2f}"),
            spread(s["statements"], "{:.0f}"), f"`{s['counts_line']}`",
        ])
    ss.notes += [
        "Database ms: every statement the command sent (schema check, the board's reads with "
        "claims_limit 1,000, paused queues, schedules), execution + planning, from "
        "pg_stat_statements before and after (PGOPTIONS turns track_planning on for its "
        "session). Wall ms includes starting Python and importing Taskboard (and for `uv "
        "run`, uv's environment check).",
    ]

    # Load.
    ld = Section(
        "Load during each timed phase",
        ["state", "phase", "seconds", "load average (1 min) at start / end",
         "other processes, cores"],
    )
    for ph in run.phases:
        ld.rows.append([STATE_LABELS[ph.state], ph.name, f"{ph.seconds:.1f}",
                        f"{ph.load_start:.2f} / {ph.load_end:.2f}", f"{ph.other_cores:.2f}"])
    ld.notes.append(f"{os.cpu_count()} cores; other processes = neither the bench, its workers "
                    "nor this PostgreSQL (sampled once a second, as bench/common.py does).")

    out = [head, states, pr, cl, tp, rf, bs, ss, ld]
    for name in BOARD_STATEMENTS:
        costly = [k for k in all_states
                  if (v := st[k]["refresh_statements"].get(name))
                  and (v["ms"] > PLAN_SHOWN_MS or v["blks"] > PLAN_SHOWN_BLOCKS)]
        if not costly:
            continue
        for key in all_states:
            out.append(Section(
                f"Plan: {name}, {STATE_LABELS[key]} (EXPLAIN ANALYZE, BUFFERS; the dashboard's "
                "parameters)", ["EXPLAIN (ANALYZE, BUFFERS)"],
                [[f"`{line}`"] for line in st[key]["board_plans"][name]]))
    plan = st["b"]["claims"][-1]["plan"]
    out.append(Section(f"Plan: CLAIM, generic, {STATE_LABELS['b']} (EXPLAIN ANALYZE, BUFFERS; "
                       "last of the last run, rolled back)",
                       ["EXPLAIN (ANALYZE, BUFFERS)"], [[f"`{line}`"] for line in plan]))
    return out


def _ratio_target(name: str, goal: str, base: float, value: float, *, higher_is_better: bool,
                  unit: str, fmt: str) -> Target:
    ratio = value / base if base else float("nan")
    met, how = _judge_ratio(ratio, higher_is_better)
    measured = (f"{_fmt_ratio(ratio)} ({fmt.format(value)} vs {fmt.format(base)} {unit}; "
                f"{how})")
    return Target(name, goal, measured, met if ratio == ratio else None)


def _judge_ratio(ratio: float, higher_is_better: bool) -> tuple[bool, str]:
    """Within RATIO_TARGET of 1 on the right side, and by how much."""
    if higher_is_better:
        met = ratio >= 1 - RATIO_TARGET
        how = (f"{(ratio - 1) * 100:+.1f}%" if met else
               f"{(1 - ratio) * 100:.1f}% lower, {(1 - RATIO_TARGET - ratio) * 100:.1f} "
               "points past the limit")
    else:
        met = ratio <= 1 + RATIO_TARGET
        how = (f"{(ratio - 1) * 100:+.1f}%" if met else
               f"{(ratio - 1) * 100:.1f}% higher, {(ratio - 1 - RATIO_TARGET) * 100:.1f} "
               "points past the limit")
    return met, how


def _limit_target(name: str, limit: float, value: float, what: str) -> Target:
    met = value < limit
    how = (f"{limit - value:.1f} ms under" if met else f"{value - limit:.1f} ms over "
           f"({value / limit:.1f}x the limit)")
    return Target(name, f"< {limit:g} ms", f"{value:.2f} ms {what} ({how})", met)


def targets(run: Run) -> list[Target]:
    st = run.states
    out = []
    a = st["a"]
    for key in ("b", "c"):
        s = st[key]
        label = STATE_LABELS[key]
        claim = _ratio_target(
            f"claim cost (CLAIM execution + planning), {label} / (a)", "within 10% (<= 1.10x)",
            median(claim_ms(a)), median(claim_ms(s)), higher_is_better=False, unit="ms",
            fmt="{:.3f}")
        exec_a, exec_s = median(claim_ms(a, "exec_ms")), median(claim_ms(s, "exec_ms"))
        claim.measured += f"; execution alone {exec_s / exec_a:.2f}x ({exec_s:.3f} vs {exec_a:.3f} ms)"
        out.append(claim)
        for workers in (1, 2):
            pairs = paired_ratios(s, workers)
            ratio = median(pairs)
            met, how = _judge_ratio(ratio, higher_is_better=True)
            out.append(Target(
                f"no-op throughput, {workers} worker(s), {label} / (a), interleaved pairs",
                "within 10% (>= 0.90x)",
                f"{_fmt_ratio(ratio)} median of {len(pairs)} pairs "
                f"({', '.join(_fmt_ratio(p) for p in pairs)}; medians "
                f"{median(rates(s, workers)):,.0f} vs "
                f"{median(rates(s, workers, 'throughput_ref')):,.0f} jobs/s; {how})",
                met if ratio == ratio else None))
    for key in ("b", "c0", "c"):
        s = st[key]
        label = STATE_LABELS[key]
        db = refresh_db(s)
        out.append(_limit_target(f"dashboard refresh database time, {label}",
                                 REFRESH_TARGET_MS, percentile(db, 95),
                                 f"p95 of {len(db)} (median {median(db):.2f})"))
        sdb = s["status"]["db_ms"]
        out.append(_limit_target(f"`taskboard status` database time, {label}",
                                 STATUS_TARGET_MS, median(sdb),
                                 f"median of {len(sdb)} (max {max(sdb):.2f}; wall "
                                 f"{median(s['status']['script_wall']):,.0f} ms)"))
    return out


# --- the waiting-count triggers on and off (--count-triggers) ------------------------------

WAITING_TRIGGERS = ("taskboard_count_waiting_update", "taskboard_count_waiting_insert",
                    "taskboard_count_waiting_delete")
CONTENDED_CYCLES = 2_000  # complete 8 + claim 8 cycles per measurement, split over sessions


def trigger_time(board: BigBoard) -> dict[str, tuple[int, float]]:
    """Calls and total ms of the counting trigger functions so far (track_functions)."""
    board.conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = board.conn.execute(
        "SELECT funcname, calls, total_time FROM pg_stat_user_functions"
        " WHERE funcname IN ('taskboard_count_waiting', 'taskboard_count_finished')").fetchall()
    return {name: (int(calls), float(ms)) for name, calls, ms in rows}


def trigger_ms_per_call(before: dict[str, tuple[int, float]],
                        after: dict[str, tuple[int, float]], name: str) -> float:
    calls = after.get(name, (0, 0.0))[0] - before.get(name, (0, 0.0))[0]
    ms = after.get(name, (0, 0.0))[1] - before.get(name, (0, 0.0))[1]
    return ms / calls if calls else float("nan")


def set_waiting_triggers(board: BigBoard, on: bool) -> None:
    """Migration 5's counting on or off (writes made while off are counted nowhere: the
    rounds below enqueue and finish all of their own jobs in one setting)."""
    for name in WAITING_TRIGGERS:
        board.conn.execute(f"ALTER TABLE taskboard_jobs {'ENABLE' if on else 'DISABLE'} "
                           f"TRIGGER {name}")


async def contended_round(board: BigBoard, sessions: int) -> dict[str, float]:
    """`sessions` connections each run the worker's steady state (complete 8 + claim 8,
    pipelined) on one queue and kind at once; a sampler counts sessions waiting on a lock."""
    watermark = board.watermark()
    client = TaskboardClient(board.url)
    await client.open()
    await client.enqueue_noops(READY)
    await client.close()
    params = {"limit": CLAIM_BATCH, "lease_seconds": 60.0, "queues": ["default"],
              "kinds": ["noop"]}
    conns = [await psycopg.AsyncConnection.connect(board.url, autocommit=True)
             for _ in range(sessions)]
    sampler = await psycopg.AsyncConnection.connect(board.url, autocommit=True)
    board.server.reset_statements()
    done = asyncio.Event()
    samples = [0, 0]

    async def sample() -> None:
        while not done.is_set():
            cur = await sampler.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'")
            row = await cur.fetchone()
            samples[0] += 1
            samples[1] += int(row[0]) if row else 0
            await asyncio.sleep(0.005)

    async def session(i: int, conn: psycopg.AsyncConnection[Any]) -> None:
        got = await leases.claim(conn, worker_id=f"ab-{i}", **params)
        for _ in range(CONTENDED_CYCLES // sessions - 1):
            _, got = await leases.complete_many_and_claim(
                conn, [j.lease for j in got], worker_id=f"ab-{i}", **params)
        await leases.complete_many(conn, [j.lease for j in got])

    sampling = asyncio.create_task(sample())
    t0 = time.perf_counter()
    await asyncio.gather(*(session(i, c) for i, c in enumerate(conns)))
    wall = time.perf_counter() - t0
    done.set()
    await sampling
    rows = board.statement_rows()
    for c in [*conns, sampler]:
        await c.close()
    claim = _summed([r for r in rows if CLAIM_PHRASE in r["query"]])
    complete = _summed([r for r in rows if COMPLETE_PHRASE in r["query"]])
    await board.reset(watermark)
    return {"jobs_s": CONTENDED_CYCLES * CLAIM_BATCH / wall,
            "claim_ms": claim["total_exec_time"] / claim["calls"],
            "complete_ms": complete["total_exec_time"] / max(1, complete["calls"]),
            "lock_waiting": samples[1] / max(1, samples[0])}


async def count_triggers_ab(server: BenchServer, args: argparse.Namespace) -> Section:
    """The claim and the completion with migration 5's triggers on and off, interleaved:
    one connection, then 2 and 8 at once on one queue and kind (the hot-counter case)."""
    board = BigBoard(server, args.quick)
    claims = 200 if args.quick else CLAIMS
    results: dict[tuple[bool, str], list[dict[str, float]]] = {}
    try:
        await board.migrate()
        # Time spent in the trigger functions, per call, for the sessions opened from now.
        board.conn.execute(f"ALTER DATABASE {board.dbname} SET track_functions = 'pl'")
        for i in range(args.runs):
            for on in ((False, True) if i % 2 == 0 else (True, False)):
                set_waiting_triggers(board, on)
                log(f"round {i + 1}/{args.runs}, waiting-count triggers {'on' if on else 'off'}")
                before = trigger_time(board)
                r = await claim_round(board, claims, explain=False)
                await asyncio.sleep(0.5)  # the closed sessions' function stats flushed
                after = trigger_time(board)
                results.setdefault((on, "1"), []).append(
                    {"claim_ms": r["exec_ms"], "complete_ms": r["complete_ms"],
                     "roundtrip_ms": r["roundtrip_ms"],
                     "waiting_ms": trigger_ms_per_call(before, after,
                                                       "taskboard_count_waiting"),
                     "finished_ms": trigger_ms_per_call(before, after,
                                                        "taskboard_count_finished")})
                for n in (2, 8):
                    before = trigger_time(board)
                    r2 = await contended_round(board, n)
                    await asyncio.sleep(0.5)
                    after = trigger_time(board)
                    r2["waiting_ms"] = trigger_ms_per_call(before, after,
                                                           "taskboard_count_waiting")
                    r2["finished_ms"] = trigger_ms_per_call(before, after,
                                                            "taskboard_count_finished")
                    results.setdefault((on, str(n)), []).append(r2)
        set_waiting_triggers(board, True)
    finally:
        board.close()
    section = Section(
        "Migration 5's waiting-count triggers off / on (claim and completion cost)",
        ["sessions", "triggers", "CLAIM server ms", "COMPLETE_MANY server ms",
         "complete 8 + claim 8 client ms (1 session) / jobs/s (all sessions)",
         "sessions waiting on a lock (mean of samples)",
         "waiting-count trigger ms per call", "finished-count trigger ms per call"],
    )
    for n in ("1", "2", "8"):
        for on in (False, True):
            rs = results[(on, n)]

            def cell(key: str, fmt: str, rs: list[dict[str, float]] = rs) -> str:
                vals = [r[key] for r in rs]
                return f"{median(vals):{fmt}} ({min(vals):{fmt}}-{max(vals):{fmt}})"

            third = cell("roundtrip_ms", ".3f") if n == "1" else cell("jobs_s", ",.0f")
            waits = cell("lock_waiting", ".2f") if n != "1" else "-"
            waiting = cell("waiting_ms", ".4f") if on else "-"
            section.rows.append([n, "on" if on else "off", cell("claim_ms", ".3f"),
                                 cell("complete_ms", ".3f"), third, waits, waiting,
                                 cell("finished_ms", ".4f")])
    section.notes += [
        f"Median (min-max) of {args.runs} rounds, off and on interleaved (the order swapped "
        "each round), on one database. 1 session: bench/big_table.py's claim measurement "
        f"({claims:,} claims of {CLAIM_BATCH} on {READY:,} ready jobs, each group's completion "
        "pipelined with the next claim). 2 and 8 sessions: the same steady state on every "
        f"session at once, {CONTENDED_CYCLES:,} cycles split between them, on one queue and "
        "kind, so every claim adds to the same counter; the lock column samples "
        "pg_stat_activity every 5 ms.",
        "Server ms: pg_stat_statements mean_exec_time per call (the triggers run inside the "
        "statement, so their cost is in it). Trigger ms per call: pg_stat_user_functions "
        "(track_functions = pl) total_time / calls of each counting trigger's function over "
        "the measurement: one call per statement that writes taskboard_jobs (claims, "
        "completions, the enqueue of the ready jobs and the DELETE that removes them "
        "afterwards; those two are one call each over 20,000 rows).",
    ]
    return section


# --- entry points --------------------------------------------------------------------------


async def measure(server: BenchServer, args: argparse.Namespace) -> list[Section]:
    """For run_all.py (`--only big_table`)."""
    run, settings = await run_states(server, args)
    out = sections(run, args)
    out[0].notes.append(_settings_line(settings))
    return out


def _settings_line(settings: dict[str, str]) -> str:
    return "Other server settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()) + "."


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--throughput-jobs", type=int, default=THROUGHPUT_JOBS, metavar="N",
                        help=f"no-op jobs per throughput run (default {THROUGHPUT_JOBS:,}; "
                             "more gives steadier rates on a noisy host)")
    parser.add_argument("--count-triggers", action="store_true",
                        help="only the claim and completion with migration 5's waiting-count "
                             "triggers off and on, interleaved")
    args = parser.parse_args()
    server = BenchServer()
    server.start()
    started = time.monotonic()
    if args.count_triggers:
        try:
            with watching_foreign_load():
                mark = foreign_mark()
                section = asyncio.run(count_triggers_ab(server, args))
                section.notes.append(foreign_note(mark))
            print(f"Generated by `uv run --group bench python bench/big_table.py "
                  f"--count-triggers --runs {args.runs}` on {time.strftime('%Y-%m-%d %H:%M %Z')}"
                  f". Load average at the end: "
                  + " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min).\n")
            print(section.markdown())
        finally:
            server.stop()
        return
    try:
        with watching_foreign_load():
            mark = foreign_mark()
            run, settings = asyncio.run(run_states(server, args))
            note = foreign_note(mark)
        out = sections(run, args)
        mode = "--quick (100k rows, 1 run: NOT representative)" if args.quick else \
            f"--runs {args.runs} --throughput-jobs {throughput_jobs(args)}"
        print("# Taskboard with a million finished jobs (issues 11 and 12)\n")
        print(f"Generated by `uv run --group bench python bench/big_table.py {mode}` on "
              f"{time.strftime('%Y-%m-%d %H:%M %Z')} in "
              f"{(time.monotonic() - started) / 60:.0f} min. Load average at the end: "
              + " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min).\n")
        print(environment_markdown(server))
        print("- " + _settings_line(settings) + "\n")
        print("## Targets\n")
        print(targets_markdown(out[0].targets) + "\n")
        print("## Results\n")
        out[0].targets = []  # printed above
        out[0].notes.append(note)
        for section in out:
            print(section.markdown())
    finally:
        server.stop()


if __name__ == "__main__":
    main()
