"""What Taskboard's claim and grouped completion cost inside PostgreSQL.

On a fresh database with 20,000 pending no-op jobs, runs the engine's own CLAIM (a group
of 100 rows, what one worker with the default concurrency claims) and then COMPLETE_MANY
for those rows under EXPLAIN (ANALYZE, BUFFERS, WAL), each inside a transaction that is
rolled back, and prints the plans with per-node times; then times a bare claim and ack of
as many rows (FOR UPDATE SKIP LOCKED on a table with no history) the same way. Repeats a
few times and keeps the last plan, so caches are warm.

    uv run --group bench python bench/explain_taskboard.py
"""

from __future__ import annotations

import argparse

import psycopg
from common import BenchServer, Section, base_parser, main_for
from taskboard.core import sql
from taskboard.core.engine.leases import _claim_params, _completion_params
from taskboard.core.engine.schema import migrate

JOBS = 20_000
BATCH = 100
COMPLETE_LABEL = f"complete {BATCH} (COMPLETE_MANY)"
REPEAT = 20

BARE_CLAIM = """
UPDATE bare_jobs SET claimed_at = now(), token = gen_random_uuid()
 WHERE id IN (SELECT id FROM bare_jobs WHERE claimed_at IS NULL ORDER BY id
              LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, token
"""
BARE_ACK = """
UPDATE bare_jobs j SET done_at = now()
  FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
 WHERE j.id = r.id AND j.token = r.token
"""


def _explain(conn: psycopg.Connection, query: str, params: dict) -> tuple[list[str], float]:
    rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, WAL, TIMING) {query}", params).fetchall()
    lines = [r[0] for r in rows]
    total = next((float(line.split()[2]) for line in lines if line.startswith("Execution Time")), 0.0)
    return lines, total


async def measure(server: BenchServer, args: argparse.Namespace) -> list[Section]:
    name, url = server.fresh_database("explain")
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
            await migrate(aconn)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO taskboard_jobs (kind, payload) "
                "SELECT 'noop', '{}'::jsonb FROM generate_series(1, %s)", (JOBS,))
            conn.execute("CREATE TABLE bare_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                         "payload jsonb NOT NULL DEFAULT '{}', token uuid, claimed_at timestamptz, "
                         "done_at timestamptz)")
            conn.execute("INSERT INTO bare_jobs (payload) SELECT '{}'::jsonb "
                         "FROM generate_series(1, %s)", (JOBS,))
            conn.execute("CREATE INDEX bare_ready ON bare_jobs (id) WHERE claimed_at IS NULL")
            conn.execute("VACUUM ANALYZE")
            claim_params = _claim_params("explain", BATCH, 60.0, ["default"], ["noop"], [])
            plans, times = _cycle(conn, claim_params)
            # The same statements once 20,000 jobs have been completed and not yet vacuumed:
            # their entries are still in the partial "ready" index the claim scans first.
            conn.execute("UPDATE taskboard_jobs SET completed_at = now()")
            conn.execute("INSERT INTO taskboard_jobs (kind, payload) "
                         "SELECT 'noop', '{}'::jsonb FROM generate_series(1, %s)", (JOBS,))
            conn.execute("UPDATE bare_jobs SET claimed_at = now(), done_at = now()")
            conn.execute("INSERT INTO bare_jobs (payload) SELECT '{}'::jsonb "
                         "FROM generate_series(1, %s)", (JOBS,))
            conn.execute("ANALYZE")  # statistics only: no VACUUM, as mid-run
            late_plans, late_times = _cycle(conn, claim_params)
    finally:
        server.drop_database(name)
    summary = Section(f"Server execution time of {BATCH}-row statements (EXPLAIN ANALYZE, median "
                      f"of {REPEAT}, rolled back)",
                      ["statement", f"{JOBS:,} pending, fresh table: median ms",
                       f"same after {JOBS:,} completed, not vacuumed: median ms"])
    labels = {"claim": f"claim {BATCH} (CLAIM)", "complete": COMPLETE_LABEL,
              "bare claim": f"bare claim {BATCH} (SKIP LOCKED)", "bare ack": f"bare ack {BATCH}"}
    for key, values in times.items():
        late = sorted(late_times[key])
        values = sorted(values)
        summary.rows.append([labels[key], f"{values[len(values) // 2]:.3f}",
                             f"{late[len(late) // 2]:.3f}"])
    summary.notes.append("The engine's statements from taskboard.core.sql as the worker runs "
                         "them; bare = FOR UPDATE SKIP LOCKED claim and ack with no attempt "
                         "history and no reclaim branch.")
    out = [summary]
    for label, chosen in (("fresh table", plans), ("after 20,000 completed, not vacuumed", late_plans)):
        plan = Section(f"Plan: claim, {label}", ["EXPLAIN (ANALYZE, BUFFERS, WAL)"],
                       [[f"`{line}`"] for line in chosen["claim"][0]])
        out.append(plan)
    out.append(Section(f"Plan: {COMPLETE_LABEL}, fresh table", ["EXPLAIN (ANALYZE, BUFFERS, WAL)"],
                       [[f"`{line}`"] for line in plans["complete"][0]]))
    return out


def _cycle(conn: psycopg.Connection, claim_params: dict) -> tuple[dict, dict]:
    """REPEAT rolled-back rounds of claim+complete and bare claim+ack; plans and times."""
    plans: dict[str, tuple[list[str], float]] = {}
    times: dict[str, list[float]] = {k: [] for k in ("claim", "complete", "bare claim", "bare ack")}
    for _ in range(REPEAT):
        with conn.transaction(force_rollback=True):
            plans["claim"] = _explain(conn, sql.CLAIM, claim_params)
            times["claim"].append(plans["claim"][1])
            claimed = conn.execute(
                "SELECT id, lease_token FROM taskboard_jobs WHERE lease_token IS NOT NULL"
            ).fetchall()
            plans["complete"] = _explain(
                conn, sql.COMPLETE_MANY, _completion_params([(r[0], r[1]) for r in claimed], None))
            times["complete"].append(plans["complete"][1])
        with conn.transaction(force_rollback=True):
            plans["bare claim"] = _explain(conn, BARE_CLAIM, {"limit": BATCH})
            times["bare claim"].append(plans["bare claim"][1])
            got = conn.execute("SELECT id, token FROM bare_jobs WHERE token IS NOT NULL").fetchall()
            plans["bare ack"] = _explain(conn, BARE_ACK, {"ids": [r[0] for r in got],
                                                          "tokens": [r[1] for r in got]})
            times["bare ack"].append(plans["bare ack"][1])
    return plans, times


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0], runs=1))
