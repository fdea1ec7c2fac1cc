"""Do fleet-wide limits cost the kinds without one anything? No-op throughput of one worker
whose registry holds only the built-in kinds, against one whose registry also holds a kind
under a rate limit (5/s) with 1,000 of its jobs waiting on it the whole run: that worker
runs the limited kind's claim transaction beside every ordinary claim loop.

Runs alternate (alone, beside, alone, beside...) in one invocation on one server, each on a
fresh database: 20,000 no-op jobs enqueued at once, timed from the enqueue's commit to the
database recording the last no-op finished. Each run also reports its pickup (commit to the
first no-op finished), the drain rate after it, and CPU per job (the worker process and the
server's, psutil), the figure a shared machine moves least.

The jobs are inserted with one INSERT ... SELECT and woken with the NOTIFY that
`enqueue_many` sends (one per queue, on commit). Before 2026-12-04 the script sent no NOTIFY:
the worker found the jobs at its next 5 s fallback poll, which cost each run 0-5 s of pickup
(it started right after the worker came up, so mostly ~4-5 s), and "beside" runs went fast
whenever the limited kind's claim loop happened to claim first. `--raw-insert` reproduces
that (see bench/results-limits.md).

    uv run --group bench python bench/limits.py [--runs 3] [--jobs 20000] [--raw-insert]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg
from common import BenchServer, cpu_snapshot, cpu_used

HERE = Path(__file__).resolve().parent
APPS = {"alone": "tb_limited:alone", "beside": "tb_limited:beside"}


def one_run(server: BenchServer, flavor: str, jobs: int, *, notify: bool = True) -> dict[str, float]:
    name, url = server.fresh_database(f"limits_{flavor}")
    env = {**os.environ, "TASKBOARD_DATABASE_URL": url,
           "PYTHONPATH": f"{HERE / 'runners'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cli = [sys.executable, "-m", "taskboard.core.cli"]
    subprocess.run([*cli, "migrate"], env=env, check=True, capture_output=True)
    worker = subprocess.Popen([*cli, "worker", "--app", APPS[flavor], "--id", "bench"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            while not conn.execute("SELECT count(*) FROM taskboard_workers"
                                   " WHERE state = 'running'").fetchone()[0]:
                time.sleep(0.05)
            if flavor == "beside":
                conn.execute("INSERT INTO taskboard_jobs (kind, payload)"
                             " SELECT 'paced', '{}' FROM generate_series(1, 1000)")
                if notify:
                    conn.execute("SELECT pg_notify('taskboard_jobs', 'default')")
            proc = psutil.Process(worker.pid)
            pids = [proc.pid, *(c.pid for c in proc.children(recursive=True))]
            before = cpu_snapshot([*pids, *server.postgres_pids()])
            with conn.transaction():
                conn.execute("INSERT INTO taskboard_jobs (kind, payload)"
                             " SELECT 'noop', '{}' FROM generate_series(1, %s)", (jobs,))
                if notify:  # as enqueue_many does: workers hear of the jobs on commit
                    conn.execute("SELECT pg_notify('taskboard_jobs', 'default')")
            started = time.monotonic()
            first = None
            while left := conn.execute("SELECT count(*) FROM taskboard_jobs WHERE kind = 'noop'"
                                       " AND completed_at IS NULL").fetchone()[0]:
                if first is None and left < jobs:
                    first = time.monotonic()
                time.sleep(0.05)
            ended = time.monotonic()
            after = cpu_snapshot([*pids, *server.postgres_pids()])
            first = first if first is not None else ended
            return {"rate": jobs / (ended - started), "pickup": first - started,
                    "drain": jobs / max(ended - first, 1e-3),
                    "worker_ms": 1000 * cpu_used({p: before.get(p, 0.0) for p in pids},
                                                 {p: after[p] for p in pids if p in after}) / jobs,
                    "cpu_ms": 1000 * cpu_used(before, after) / jobs}
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        server.drop_database(name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--data-dir", type=Path, default=None,
                   help="the embedded server's folder (default: the benchmarks' own)")
    p.add_argument("--raw-insert", action="store_true",
                   help="insert without the NOTIFY enqueue sends (the old measurement: the "
                        "worker finds the jobs at its next 5 s poll)")
    args = p.parse_args()
    server = BenchServer(args.data_dir) if args.data_dir else BenchServer()
    server.start()
    got: dict[str, list[dict[str, float]]] = {"alone": [], "beside": []}
    try:
        for run in range(args.runs):
            for flavor in got:
                r = one_run(server, flavor, args.jobs, notify=not args.raw_insert)
                got[flavor].append(r)
                print(f"run {run + 1} {flavor:<7} {r['rate']:8.0f} no-op jobs/s (pickup "
                      f"{r['pickup']:.2f} s, then {r['drain']:.0f}/s), CPU {r['cpu_ms']:.3f} "
                      f"ms/job (worker {r['worker_ms']:.3f})", flush=True)
    finally:
        server.stop()
    how = "raw INSERT, no NOTIFY" if args.raw_insert else "INSERT + NOTIFY, as enqueue"
    print(f"\n{how}, {args.jobs:,} jobs, load average {os.getloadavg()[0]:.2f} at the end\n")
    print("| registry | runs | no-op jobs/s, median (min-max) | pickup s, median (min-max) |"
          " drain after pickup, jobs/s | worker CPU ms/job | worker + PostgreSQL CPU ms/job |"
          "\n|---|---|---|---|---|---|---|")
    for flavor, rs in got.items():
        label = "no-op alone" if flavor == "alone" else "no-op beside a rate-limited kind"
        print(f"| {label} | {len(rs)} | {_spread([r['rate'] for r in rs], '{:.0f}')} | "
              f"{_spread([r['pickup'] for r in rs], '{:.2f}')} | "
              f"{_spread([r['drain'] for r in rs], '{:.0f}')} | "
              f"{_spread([r['worker_ms'] for r in rs], '{:.3f}')} | "
              f"{_spread([r['cpu_ms'] for r in rs], '{:.3f}')} |")


def _spread(values: list[float], fmt: str) -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


if __name__ == "__main__":
    main()
