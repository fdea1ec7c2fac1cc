"""Processing rate of no-op jobs, 8 in flight per worker, one worker process and two.

Per run: a fresh database, N worker processes started and settled, then 20,000 no-op jobs
enqueued in one batch; the clock starts when the enqueue commits and stops when the
database records the last job finished. Beside the rate: statements per job seen by
pg_stat_statements, and CPU per job in the worker processes and in PostgreSQL, which is
where the time goes on a machine this small.

    uv run --group bench python bench/throughput.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from common import (
    BenchServer,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    cpu_snapshot,
    cpu_used,
    foreign_cores,
    foreign_mark,
    is_harness_query,
    log,
    main_for,
    median,
    running_workers,
    selected,
    spread,
    wait_for_quiet,
)
from systems import (
    PGQUEUER,
    PGQUEUER_PSYCOPG,
    PROCRASTINATE,
    TASKBOARD,
    Flavor,
    fresh_system,
    runner_argv,
)

JOBS = 20_000
QUICK_JOBS = 2_000
MARK = "bench:remaining"


async def one_run(server: BenchServer, flavor: Flavor, workers: int, jobs: int,
                  extra: tuple[str, ...] = ()) -> dict[str, float]:
    """One timed drain of `jobs` no-op jobs by `workers` processes."""
    async with fresh_system(server, flavor, f"tp{workers}") as (dbname, url, client):
        board = StartBoard()
        procs = [WorkerProcess(f"{flavor.system}-tp{workers}-w{i}",
                               runner_argv(flavor, url, f"w{i}", *extra), board)
                 for i in range(workers)]
        client.remaining_sql = f"/* {MARK} */ " + client.remaining_sql
        async with running_workers(procs):
            pg_before = cpu_snapshot(server.postgres_pids())
            w_before = sum(p.cpu_seconds() for p in procs)
            server.reset_statements()
            await client.enqueue_noops(jobs)
            t0 = time.monotonic()
            mark = foreign_mark()
            t1 = await _wait_drained(client, jobs)
            foreign = foreign_cores(mark)
            w_cpu = sum(p.cpu_seconds() for p in procs) - w_before
            pg_cpu = cpu_used(pg_before, cpu_snapshot(server.postgres_pids()))
            statements = [s for s in server.statements(dbname)
                          if not is_harness_query(s.query, client.remaining_sql)]
    elapsed = t1 - t0
    return {
        "rate": jobs / elapsed,
        "seconds": elapsed,
        "statements_per_job": sum(s.calls for s in statements) / jobs,
        "worker_cpu_ms": 1000 * w_cpu / jobs,
        "pg_cpu_ms": 1000 * pg_cpu / jobs,
        "foreign": foreign,
    }


async def _wait_drained(client: Any, jobs: int) -> float:
    """Monotonic time when no job is left unfinished.

    A count over a 20k-row table costs milliseconds of server CPU (procrastinate's
    status scan ~4 ms), so poll slowly until the last 5% and finely at the end.
    """
    deadline = time.monotonic() + jobs / 20 + 120
    while True:
        left = await client.remaining()
        if left == 0:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{left} of {jobs} jobs still unfinished")
        await asyncio.sleep(0.25 if left > jobs * 0.05 else 0.02)


def flavors_for(args: argparse.Namespace) -> list[Flavor]:
    """Taskboard and the peers, PgQueuer on both of its async drivers."""
    out = []
    for system in selected(args):
        if system == "taskboard":
            out.append(TASKBOARD)
        elif system == "procrastinate":
            out.append(PROCRASTINATE)
        else:
            out += [PGQUEUER, PGQUEUER_PSYCOPG]
    return out


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """All flavours x {1, 2} workers x runs."""
    jobs = QUICK_JOBS if args.quick else JOBS
    runs = 1 if args.quick else args.runs
    section = Section(
        f"No-op processing rate ({jobs:,} jobs, 8 in flight per worker)",
        ["system", "workers", "jobs/s", "seconds", "statements/job", "worker CPU ms/job",
         "PostgreSQL CPU ms/job", "other load, cores"],
    )
    rates: dict[tuple[str, int], float] = {}
    for flavor in flavors_for(args):
        for workers in (1, 2):
            results = []
            for run in range(runs):
                await wait_for_quiet()
                log(f"throughput: {flavor.label}, {workers} worker(s), run {run + 1}/{runs}")
                r = await one_run(server, flavor, workers, jobs)
                log(f"  {r['rate']:,.0f} jobs/s in {r['seconds']:.1f}s")
                results.append(r)
            rates[(flavor.label, workers)] = median([r["rate"] for r in results])
            section.rows.append([
                flavor.label, str(workers),
                spread([r["rate"] for r in results]),
                spread([r["seconds"] for r in results], "{:.1f}"),
                spread([r["statements_per_job"] for r in results], "{:.2f}"),
                spread([r["worker_cpu_ms"] for r in results], "{:.2f}"),
                spread([r["pg_cpu_ms"] for r in results], "{:.2f}"),
                spread([r["foreign"] for r in results], "{:.2f}"),
            ])
    section.data["rates"] = rates
    section.notes += [
        "Median (min-max) over runs; each run on a fresh database. The clock starts when the "
        "batch enqueue commits and stops when the database shows no unfinished job.",
        "Taskboard: lease 60 s, pool 10 (8 in flight), fenced claim/complete on. procrastinate: "
        "concurrency 8, pool 10. PgQueuer: max_concurrent_tasks 8, batch_size 4 (its limit is "
        "batch <= concurrency/2), one connection, uvloop as `pgq run` uses.",
        "statements/job counts every statement the workers ran in the database "
        "(pg_stat_statements), the harness's progress polls excluded.",
        "other load: cores used by processes outside the bench during the run (a shared "
        "machine); runs with load above ~0.2 cores are slower than the machine allows.",
    ]
    section.targets += throughput_targets(rates)
    return section


def throughput_targets(rates: dict[tuple[str, int], float]) -> list[Target]:
    """No-op processing >= 3x the faster peer, per worker count."""
    out = []
    for workers in (1, 2):
        tb = rates.get((TASKBOARD.label, workers))
        peers = {label: r for (label, w), r in rates.items() if w == workers and label != TASKBOARD.label}
        if tb is None or not peers:
            continue
        best_label, best = max(peers.items(), key=lambda kv: kv[1])
        ratio = tb / best
        out.append(Target(
            f"no-op processing, {workers} worker(s)",
            ">= 3x the faster peer, fencing on",
            f"{ratio:.2f}x {best_label} ({tb:,.0f} vs {best:,.0f} jobs/s)"
            + ("" if ratio >= 3 else f"; needs {3 * best:,.0f} jobs/s, {3 * best / tb:.1f}x more"),
            ratio >= 3,
        ))
    return out


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0]))
