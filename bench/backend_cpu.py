"""The server's CPU per no-op job for the engine's own claim and grouped completion, measured
on the backend process itself (psutil), so other load on the host barely moves it.

One connection with generic plans (as the engine's sessions force), 15,000 pending jobs, then
150 rounds of CLAIM (100 rows) and COMPLETE_MANY of those rows, each committed; the first 20
rounds warm up. Prints the backend's CPU per job for each statement, and the job table's
updates and how many of them were HOT (pg_stat_user_tables).

    uv run --group bench python bench/backend_cpu.py [--off TRIGGER,...] [--attempts-off]

`--off` disables triggers of taskboard_jobs by name and `--attempts-off` every trigger of
taskboard_attempts (what they cost). Run it in two checkouts one after the other to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import psutil
import psycopg
from common import BenchServer
from psycopg import sql as pgsql
from taskboard.core import sql
from taskboard.core.engine.leases import _claim_params, _completion_params
from taskboard.core.engine.schema import migrate

ROUNDS, WARM, BATCH, JOBS = 150, 20, 100, 15_000


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def main(args: argparse.Namespace) -> None:
    server = BenchServer()
    server.start()
    name, url = server.fresh_database("backend_cpu")
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
            await migrate(aconn)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', false)")
            conn.execute(
                "INSERT INTO taskboard_jobs (kind, payload) SELECT 'noop', '{}'::jsonb"
                " FROM generate_series(1, %s)", (JOBS,))
            conn.execute("VACUUM taskboard_jobs")  # no ANALYZE: a young table, as in a run
            for trigger in filter(None, args.off.split(",")):
                conn.execute(pgsql.SQL("ALTER TABLE taskboard_jobs DISABLE TRIGGER {}").format(
                    pgsql.Identifier(trigger)))
            if args.attempts_off:
                conn.execute("ALTER TABLE taskboard_attempts DISABLE TRIGGER ALL")
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            proc = psutil.Process(row[0])
            params = _claim_params("bench", BATCH, 60.0, ["default"], ["noop"], [])
            claim_cpu = done_cpu = 0.0
            claim_us: list[float] = []
            done_us: list[float] = []
            for i in range(ROUNDS):
                c0, w0 = _cpu(proc), time.perf_counter()
                rows = conn.execute(sql.CLAIM, params, prepare=True).fetchall()
                c1, w1 = _cpu(proc), time.perf_counter()
                held = [(r[0], r[7]) for r in rows]
                done = _completion_params(held, [(0.001, 59.0)] * len(held))
                conn.execute(sql.COMPLETE_MANY, done, prepare=True).fetchall()
                c2, w2 = _cpu(proc), time.perf_counter()
                if i >= WARM:
                    claim_cpu += c1 - c0
                    done_cpu += c2 - c1
                    claim_us.append((w1 - w0) / BATCH * 1e6)
                    done_us.append((w2 - w1) / BATCH * 1e6)
            jobs = (ROUNDS - WARM) * BATCH
            stats = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                " WHERE relname = 'taskboard_jobs'").fetchone()
        print(f"backend CPU per job (us): claim {claim_cpu / jobs * 1e6:.1f}, "
              f"completion {done_cpu / jobs * 1e6:.1f}, "
              f"both {(claim_cpu + done_cpu) / jobs * 1e6:.1f}; "
              f"client wall per row, median (us): claim {statistics.median(claim_us):.1f}, "
              f"completion {statistics.median(done_us):.1f}; "
              f"taskboard_jobs updates {stats[0] if stats else '?'}, "
              f"HOT {stats[1] if stats else '?'}")
    finally:
        server.drop_database(name)
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--off", default="", help="taskboard_jobs triggers to disable")
    parser.add_argument("--attempts-off", action="store_true",
                        help="disable every trigger of taskboard_attempts")
    asyncio.run(main(parser.parse_args()))
