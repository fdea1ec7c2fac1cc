"""What the finished-count trigger costs per row: migration 6's function against migration 3's,
and with the count triggers off, on claim- and completion-shaped 100-row updates.

Each measurement: a new database, the schema, 30,000 waiting jobs, then on one connection
300 rounds of "lease 100 jobs" and "finish those 100" (the shapes of the engine's claim and
completion, without the rest of their statements), each timed by the client. Run twice: once
with the session's first statement touching 100 rows, once with it touching none, as a
worker's first claim on an empty queue does. PL/pgSQL caches a trigger query's plan at its
first call in a session; migration 3's pairing join, planned for empty transition tables,
stays a nested loop for every later 100-row statement. The engine's sessions force generic
plans (sql.ENGINE_SESSION), as here.

    uv run --group bench python bench/count_triggers.py [--runs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from importlib import resources

import psycopg
from common import BenchServer, environment_markdown, log
from psycopg.conninfo import make_conninfo
from taskboard.core.engine.schema import migrate

ROUNDS = 300
BATCH = 100
CLAIM = ("UPDATE taskboard_jobs SET lease_token = gen_random_uuid(),"
         " lease_expires_at = now() + interval '1 minute', claimed_by = 'bench',"
         " claimed_at = now(), attempts = attempts + 1, claim_count = claim_count + 1"
         " WHERE id = ANY(%s)")
FINISH = ("UPDATE taskboard_jobs SET completed_at = now(), lease_token = NULL,"
          " lease_expires_at = NULL WHERE id = ANY(%s)")


def _migration_3_function() -> str:
    """Migration 3's taskboard_count_finished(), to put back over migration 6's."""
    folder = resources.files("taskboard.core.engine").joinpath("migrations")
    text = folder.joinpath("0003_operations.sql").read_text(encoding="utf-8")
    start = text.index("CREATE FUNCTION taskboard_count_finished()")
    end = text.index("END $$;", start) + len("END $$;")
    return text[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


VARIANTS = {
    "migration 6 (unpaired)": "",
    "migration 3 (paired)": _migration_3_function(),
    "count triggers off": "ALTER TABLE taskboard_jobs DISABLE TRIGGER USER",
}


async def measure(url: str, setup: str, first_touches_rows: bool) -> tuple[float, float]:
    """Client µs per row of the claim-shaped and the finish-shaped update (medians)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute("DROP DATABASE IF EXISTS bench_count_triggers")
        await admin.execute("CREATE DATABASE bench_count_triggers")
    db = make_conninfo(url, dbname="bench_count_triggers")
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        await migrate(conn)
        if setup:
            await conn.execute(setup.encode())
        await conn.execute("INSERT INTO taskboard_jobs (kind) SELECT 'noop'"
                           " FROM generate_series(1, %s)", (ROUNDS * BATCH,))
        await conn.execute("VACUUM ANALYZE taskboard_jobs")
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        if not first_touches_rows:
            await conn.execute(CLAIM, ([],))
            await conn.execute(FINISH, ([],))
        claims, finishes = [], []
        for r in range(ROUNDS):
            ids = list(range(r * BATCH + 1, (r + 1) * BATCH + 1))
            t = time.perf_counter()
            await conn.execute(CLAIM, (ids,))
            claims.append(time.perf_counter() - t)
            t = time.perf_counter()
            await conn.execute(FINISH, (ids,))
            finishes.append(time.perf_counter() - t)
        cur = await conn.execute(
            "SELECT (SELECT coalesce(sum(n), 0) FROM taskboard_finished_counts),"
            "       (SELECT count(*) FROM taskboard_jobs WHERE completed_at IS NOT NULL)")
        kept, scanned = await cur.fetchone() or (0, 0)
    if setup == "" and kept != scanned:
        raise RuntimeError(f"finished count {kept} != {scanned} finished rows")
    per_row = 1e6 / BATCH
    return statistics.median(claims) * per_row, statistics.median(finishes) * per_row


async def main(args: argparse.Namespace) -> None:
    server = BenchServer()
    url = server.start()
    results: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    try:
        for run in range(args.runs):
            for first in (True, False):
                names = list(VARIANTS) if run % 2 == 0 else list(VARIANTS)[::-1]
                for name in names:
                    log(f"run {run + 1}/{args.runs}: {name}, first statement touches "
                        f"{'100 rows' if first else 'none'}")
                    results.setdefault((name, first), []).append(
                        await measure(url, VARIANTS[name], first))
        print(environment_markdown(server))
    finally:
        server.stop()
    print(f"\n### Client µs per row of 100-row updates ({ROUNDS} rounds, median; "
          f"{args.runs} runs: median (min-max))\n")
    print("| the session's first statement | finished-count trigger | claim-shaped update |"
          " finish-shaped update |")
    print("|---|---|---|---|")
    for first in (True, False):
        for name in VARIANTS:
            rs = results[(name, first)]

            def cell(i: int, rs: list[tuple[float, float]] = rs) -> str:
                vals = [r[i] for r in rs]
                return f"{statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f})"

            print(f"| {'touches 100 rows' if first else 'touches none'} | {name} | {cell(0)} |"
                  f" {cell(1)} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
