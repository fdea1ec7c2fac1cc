"""Do fleet-wide limits cost the kinds without one anything? No-op throughput of one worker
whose registry holds only the built-in kinds, against one whose registry also holds a kind
under a rate limit (5/s) with 1,000 of its jobs waiting on it the whole run: that worker
runs the limited kind's claim transaction beside every ordinary claim loop.

Runs alternate (alone, beside, alone, beside...) in one invocation on one server, each on a
fresh database: 20,000 no-op jobs enqueued at once, timed from the enqueue's commit to the
database recording the last no-op finished.

    uv run --group bench python bench/limits.py [--runs 3] [--jobs 20000]
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

import psycopg
from common import BenchServer

HERE = Path(__file__).resolve().parent
APPS = {"alone": "tb_limited:alone", "beside": "tb_limited:beside"}


def one_run(server: BenchServer, flavor: str, jobs: int) -> float:
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
            conn.execute("INSERT INTO taskboard_jobs (kind, payload)"
                         " SELECT 'noop', '{}' FROM generate_series(1, %s)", (jobs,))
            started = time.monotonic()
            while conn.execute("SELECT count(*) FROM taskboard_jobs WHERE kind = 'noop'"
                               " AND completed_at IS NULL").fetchone()[0]:
                time.sleep(0.05)
            return jobs / (time.monotonic() - started)
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
    args = p.parse_args()
    server = BenchServer(args.data_dir) if args.data_dir else BenchServer()
    server.start()
    rates: dict[str, list[float]] = {"alone": [], "beside": []}
    try:
        for run in range(args.runs):
            for flavor in rates:
                rate = one_run(server, flavor, args.jobs)
                rates[flavor].append(rate)
                print(f"run {run + 1} {flavor:<7} {rate:8.0f} no-op jobs/s", flush=True)
    finally:
        server.stop()
    print("\n| registry | runs | median no-op jobs/s | min | max |\n|---|---|---|---|---|")
    for flavor, got in rates.items():
        label = "no-op alone" if flavor == "alone" else "no-op beside a rate-limited kind"
        print(f"| {label} | {len(got)} | "
              f"{statistics.median(got):.0f} | {min(got):.0f} | {max(got):.0f} |")


if __name__ == "__main__":
    main()
