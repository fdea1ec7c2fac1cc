"""Enqueue rate: one batch of 20,000 no-op jobs through each system's batch API.

No worker runs. Each measurement uses a fresh database with the system's schema; the time
is the one call from the harness (building the job list included: it is the caller's
cost of each API), commit included. The runs of all systems are interleaved (run 1 of
each, then run 2 of each, in a rotating order), so a neighbour's load falls on all of
them alike; the ratio to the fastest peer is given of the medians and run by run.

    uv run --group bench python bench/enqueue.py --runs 3
    uv run --group bench python bench/enqueue.py --runs 3 --busy 2   # with 2 CPU burners
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import AsyncIterator

import psycopg
from common import (
    BenchServer,
    Section,
    Target,
    base_parser,
    loadavg,
    log,
    main_for,
    selected,
    spread,
    wait_for_quiet,
)
from systems import Client, PgQueuerClient, ProcrastinateClient, TaskboardClient

JOBS = 20_000
QUICK_JOBS = 2_000
TARGET_RATIO = 1.2


class PgQueuerPsycopgClient(PgQueuerClient):
    """PgQueuer's `Queries.enqueue` with lists over its psycopg driver."""

    async def open(self) -> None:
        from pgqueuer import Queries
        from pgqueuer.db import PsycopgDriver

        self.pconn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        self.queries = Queries(PsycopgDriver(self.pconn))
        await self.queries.install()
        await Client.open(self)

    async def close(self) -> None:
        await self.pconn.close()
        await Client.close(self)


# (system as --systems names it, row label, client)
ROWS: list[tuple[str, str, type[Client]]] = [
    ("taskboard", "Taskboard", TaskboardClient),
    ("pgqueuer", "PgQueuer (asyncpg)", PgQueuerClient),
    ("pgqueuer", "PgQueuer (psycopg)", PgQueuerPsycopgClient),
    ("procrastinate", "procrastinate", ProcrastinateClient),
]


@contextlib.asynccontextmanager
async def fresh(server: BenchServer, system: str, client_cls: type[Client]) -> AsyncIterator[Client]:
    """A fresh database with the system's schema, through `client_cls`; dropped after."""
    dbname, url = server.fresh_database(f"{system}_enq")
    client = client_cls(url)
    try:
        await client.open()
        yield client
    finally:
        await client.close()
        server.drop_database(dbname)


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """Enqueue rate per system, interleaved runs; ratio of Taskboard to the fastest peer."""
    jobs = QUICK_JOBS if args.quick else JOBS
    runs = 1 if args.quick else args.runs
    busy = getattr(args, "busy", 0)
    rows = [r for r in ROWS if r[0] in selected(args)]
    rates: dict[str, list[float]] = {label: [] for _, label, _ in rows}
    for run in range(runs):
        turn = rows[run % len(rows):] + rows[:run % len(rows)]
        for system, label, client_cls in turn:
            await wait_for_quiet()
            log(f"enqueue: {label}, run {run + 1}/{runs} (load {loadavg()})")
            async with fresh(server, system, client_cls) as client:
                t0 = time.monotonic()
                await client.enqueue_noops(jobs)
                elapsed = time.monotonic() - t0
                assert await client.remaining() == jobs
            rates[label].append(jobs / elapsed)

    section = Section(
        f"Batch enqueue ({jobs:,} no-op jobs, one call)"
        + (f", {busy} CPU burner(s) running" if busy else ""),
        ["system", "jobs/s", "seconds", "Taskboard ÷ this"])
    mine = rates.get("Taskboard", [])
    for _, label, _ in rows:
        vals = rates[label]
        secs = [jobs / r for r in vals]
        ratio = "" if label == "Taskboard" or not mine else \
            f"{statistics.median(mine) / statistics.median(vals):.2f}x"
        section.rows.append([label, spread(vals), spread(secs, "{:.3f}"), ratio])
    peers = {label: vals for label, vals in rates.items() if label != "Taskboard" and vals}
    if mine and peers:
        best = max(peers, key=lambda label: statistics.median(peers[label]))
        ratio = statistics.median(mine) / statistics.median(peers[best])
        # Run by run: Taskboard against the fastest peer of that same run.
        per_run = [mine[i] / max(vals[i] for vals in peers.values()) for i in range(runs)]
        section.notes.append(
            f"Taskboard ÷ fastest peer ({best}): {ratio:.2f}x of the medians; run by run "
            f"(against that run's fastest peer) {', '.join(f'{r:.2f}x' for r in per_run)}.")
        section.targets.append(Target(
            "enqueue vs fastest peer" + (f" ({busy} burners)" if busy else ""),
            f">= {TARGET_RATIO:.1f}x", f"{ratio:.2f}x ({best})", ratio >= TARGET_RATIO))
    section.notes += [
        "Taskboard: `enqueue_many` (every payload through its kind's validator and the "
        "storability checks, encoded to JSON once; one INSERT ... SELECT FROM unnest of "
        "binary arrays, one NOTIFY per queue). procrastinate: `batch_defer_async`. PgQueuer: "
        "`Queries.enqueue` with lists, over asyncpg and over psycopg.",
    ]
    section.data["enqueue_rates"] = rates
    return section


if __name__ == "__main__":
    # `--busy N` (common to every script) keeps N CPU burners running for the whole run.
    main_for(measure, base_parser(__doc__.splitlines()[0]))
