"""What a durable step costs: a no-op job beside a job whose handler is one `ctx.step`.

One in-process worker (the defaults: pool 10, concurrency 8) drains N jobs of each kind from a
fresh database, in alternating runs, and the rate is the jobs completed per second from the
first claim to the last completion. The one-step job pays two statements more than the no-op
(the read of its recorded steps, its fenced checkpoint), both on the engine connection.

    uv run --group bench python bench/steps_cost.py --runs 3 --jobs 5000
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import psycopg
from taskboard.core.engine.events import EventBus
from taskboard.core.engine.schema import migrate
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.kinds import JobContext, JobKind, KindRegistry
from taskboard.core.queue.jobs import NewJob, enqueue_many

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BenchServer,
    base_parser,
    environment_markdown,
    loadavg,
    log,
    median,
    spread,
)


def _registry() -> KindRegistry:
    async def noop(ctx: JobContext) -> None:
        return None

    async def value() -> int:
        return 1

    async def one_step(ctx: JobContext) -> None:
        await ctx.step("one", value)

    registry = KindRegistry()
    registry.register(JobKind("noop", lambda p: dict(p), noop))
    registry.register(JobKind("one-step", lambda p: dict(p), one_step))
    return registry


async def _drain(url: str, kind: str, jobs: int) -> float:
    registry = _registry()
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    async with conn:
        await migrate(conn)
        for start in range(0, jobs, 1000):
            await enqueue_many(conn, registry,
                               [NewJob(kind) for _ in range(min(1000, jobs - start))])
        worker = Worker(url, registry=registry, bus=EventBus(),
                        settings=WorkerSettings(worker_id=f"bench-{kind}", lease_seconds=30))
        started = time.perf_counter()
        task = asyncio.create_task(worker.run())
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM taskboard_jobs WHERE completed_at IS NOT NULL")
            row = await cur.fetchone()
            if row is not None and row[0] >= jobs:
                break
            await asyncio.sleep(0.05)
        took = time.perf_counter() - started
        worker.drain()
        await asyncio.wait_for(task, 60)
    return jobs / took


def main() -> None:
    parser = base_parser(__doc__ or "", runs=3)
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    jobs = 500 if args.quick else args.jobs
    server = BenchServer()
    server.start()
    rates: dict[str, list[float]] = {"noop": [], "one-step": []}
    try:
        for run in range(args.runs):
            for kind in rates:
                name, url = server.fresh_database(f"steps-{kind}-{run}")
                try:
                    rate = asyncio.run(_drain(url, kind, jobs))
                finally:
                    server.drop_database(name)
                rates[kind].append(rate)
                log(f"run {run + 1}: {kind}: {rate:,.0f} jobs/s")
        print(environment_markdown(server))
        print(f"\n### A one-step job beside a no-op ({jobs:,} jobs a run, {args.runs} runs, "
              f"one worker at its defaults)\n")
        print("| kind | jobs/s, median (min-max) |")
        print("|---|---|")
        for kind, values in rates.items():
            print(f"| {kind} | {spread(values)} |")
        ratio = median(rates["one-step"]) / median(rates["noop"])
        print(f"\none-step / noop: {ratio:.2f}; load average {loadavg()}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
