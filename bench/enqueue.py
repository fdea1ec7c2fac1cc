"""Enqueue rate: one batch of 20,000 no-op jobs through each system's batch API.

No worker runs. Each run uses a fresh database with the system's schema; the time is the
one call (one statement for all three systems) from the harness, commit included.

    uv run --group bench python bench/enqueue.py --runs 3
"""

from __future__ import annotations

import argparse
import time

from common import (
    BenchServer,
    Section,
    base_parser,
    log,
    main_for,
    selected,
    spread,
    wait_for_quiet,
)
from systems import DEFAULT_FLAVORS, fresh_system

JOBS = 20_000
QUICK_JOBS = 2_000


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """Enqueue rate per system, median over runs."""
    jobs = QUICK_JOBS if args.quick else JOBS
    runs = 1 if args.quick else args.runs
    section = Section(f"Batch enqueue ({jobs:,} no-op jobs, one call)",
                      ["system", "jobs/s", "seconds"])
    for system in selected(args):
        flavor = DEFAULT_FLAVORS[system]
        rates, secs = [], []
        for run in range(runs):
            await wait_for_quiet()
            log(f"enqueue: {flavor.label}, run {run + 1}/{runs}")
            async with fresh_system(server, flavor, "enq") as (_, _, client):
                t0 = time.monotonic()
                await client.enqueue_noops(jobs)
                elapsed = time.monotonic() - t0
                assert await client.remaining() == jobs
            rates.append(jobs / elapsed)
            secs.append(elapsed)
        section.rows.append([flavor.label, spread(rates), spread(secs, "{:.2f}")])
    section.notes.append(
        "Taskboard: `enqueue_many` (validates every payload, one INSERT ... SELECT FROM unnest "
        "with one NOTIFY per queue). procrastinate: `batch_defer_async`. PgQueuer: "
        "`Queries.enqueue` with lists, asyncpg.")
    return section


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0]))
