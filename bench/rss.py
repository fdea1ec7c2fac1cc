"""Worker memory: RSS of one worker process at start, after 20,000 and after 100,000 no-op jobs.

Per system: a fresh database and one worker process (8 in flight). RSS is read with psutil
once the worker has settled, then after the database shows the first 20,000 jobs finished,
then after 80,000 more (enqueued in batches of 20,000). Growth between 20k and 100k is what
a long-running worker would keep accumulating (the target is under 10 MB).

    uv run --group bench python bench/rss.py --runs 1
"""

from __future__ import annotations

import argparse

from common import (
    BenchServer,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    log,
    main_for,
    median,
    running_workers,
    selected,
    spread,
    wait_until,
)
from systems import DEFAULT_FLAVORS, Client, fresh_system, runner_argv

FIRST, TOTAL, BATCH = 20_000, 100_000, 20_000
QUICK_FIRST, QUICK_TOTAL, QUICK_BATCH = 2_000, 10_000, 2_000
MB = 1024 * 1024


async def _drain(client: Client, jobs: int, batch: int) -> None:
    for _ in range(jobs // batch):
        await client.enqueue_noops(batch)

    async def done() -> bool:
        return await client.remaining() == 0

    await wait_until(done, timeout=jobs / 20 + 120, every=0.2, what=f"{jobs} jobs to finish")


async def one_run(server: BenchServer, system: str, first: int, total: int, batch: int) -> list[float]:
    """[start, after `first`, after `total`] RSS in MB."""
    flavor = DEFAULT_FLAVORS[system]
    async with fresh_system(server, flavor, "rss") as (_, url, client):
        procs = [WorkerProcess(f"{system}-rss", runner_argv(flavor, url, "w0"), StartBoard())]
        async with running_workers(procs):
            worker = procs[0]
            out = [worker.rss() / MB]
            await _drain(client, first, batch)
            out.append(worker.rss() / MB)
            log(f"  after {first:,}: {out[-1]:.1f} MB")
            await _drain(client, total - first, batch)
            out.append(worker.rss() / MB)
            log(f"  after {total:,}: {out[-1]:.1f} MB")
            return out


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """RSS per system, median over runs."""
    first, total, batch = (QUICK_FIRST, QUICK_TOTAL, QUICK_BATCH) if args.quick else (FIRST, TOTAL, BATCH)
    runs = 1 if args.quick else args.runs
    section = Section(f"Worker RSS (one worker process, {total:,} no-op jobs)",
                      ["system", "at start MB", f"after {first:,} MB", f"after {total:,} MB",
                       f"growth {first // 1000}k -> {total // 1000}k MB"])
    for system in selected(args):
        rows = []
        for run in range(runs):
            log(f"rss: {DEFAULT_FLAVORS[system].label}, run {run + 1}/{runs}")
            rows.append(await one_run(server, system, first, total, batch))
        growth = [r[2] - r[1] for r in rows]
        section.rows.append([DEFAULT_FLAVORS[system].label,
                             *(spread([r[i] for r in rows], "{:.1f}") for i in range(3)),
                             spread(growth, "{:+.1f}")])
        if system == "taskboard":
            g = median(growth)
            section.targets.append(Target(
                f"Taskboard RSS growth {first // 1000}k -> {total // 1000}k jobs", "< 10 MB",
                f"{g:+.1f} MB", None if args.quick else g < 10))
    section.notes.append("psutil RSS of the worker process; PgQueuer deletes finished jobs, "
                         "procrastinate and Taskboard keep them (their defaults).")
    return section


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0], runs=1))
