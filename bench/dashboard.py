"""The dashboard under load: 1,000 claimed jobs across 20 workers.

Prints whether `taskboard-tui` keeps its refresh cadence, its frame time (applying one
snapshot to the widgets, and the event-loop stalls that rendering causes), its CPU share,
and the renewal lateness of a worker embedded in the dashboard's fleet, as `taskboard-tui`
runs it (on the fleet's worker thread), holding 8 CPU-busy handlers while the dashboard
renders the board with 1,000 claims.

    uv run --group bench python bench/dashboard.py [--seconds 30] [--runs 3]

The app runs headless (Textual's headless driver composes and renders every frame; only
the bytes are not written to a terminal), the same way the snapshot tests run it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import time
from typing import Any

import psutil
import psycopg
from common import BenchServer, log
from renewal import LATENESS_LEASE
from taskboard.core.engine.schema import migrate
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.runtime.db import Database
from taskboard.tui.app import TaskboardApp

CLAIMS = 1000
BUSY_HANDLERS = 8
WORKERS = 20
SIZE = (160, 50)

SEED_WORKERS = """
INSERT INTO taskboard_workers (id, host, pid, lease_seconds, capacity, pool_max, in_flight)
SELECT 'fleet-' || g, 'host-' || (g %% 4), 1000 + g, 60, 50, 52, 50
  FROM generate_series(1, %(workers)s) g
"""
SEED_CLAIMS = """
INSERT INTO taskboard_jobs (kind, payload, lease_token, lease_expires_at, claimed_by,
                            claimed_at, attempts)
SELECT 'sleep', '{"seconds": 600}', gen_random_uuid(),
       now() + make_interval(secs => 30 + (g %% 600)), 'fleet-' || (1 + g %% %(workers)s),
       now(), 1
  FROM generate_series(1, %(claims)s) g
"""
HEARTBEAT = "UPDATE taskboard_workers SET heartbeat_at = now() WHERE id LIKE 'fleet-%%'"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def seed(url: str) -> None:
    """Schema, 20 workers and 1,000 live claims spread over them."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)
        await conn.execute(SEED_WORKERS, {"workers": WORKERS})
        await conn.execute(SEED_CLAIMS, {"workers": WORKERS, "claims": CLAIMS})


class Probe:
    """Timings taken around the app's refresh and render, and the event loop's stalls."""

    def __init__(self) -> None:
        self.refresh_done: list[float] = []
        self.read_ms: list[float] = []
        self.frame_ms: list[float] = []
        self.loop_stall_ms: list[float] = []

    def wrap(self, app: TaskboardApp, fleet: Fleet) -> None:
        read = fleet.refresh
        show = app._show_snapshot

        async def timed_read() -> Any:
            t0 = time.perf_counter()
            try:
                return await read()
            finally:
                self.read_ms.append((time.perf_counter() - t0) * 1000)

        def timed_show(snapshot: Any) -> None:
            t0 = time.perf_counter()
            show(snapshot)
            self.frame_ms.append((time.perf_counter() - t0) * 1000)
            self.refresh_done.append(time.monotonic())

        fleet.refresh = timed_read  # type: ignore[method-assign]
        app._show_snapshot = timed_show  # type: ignore[method-assign]

    async def watch_loop(self, period: float = 0.01) -> None:
        """How late a 10 ms timer fires: what any timer (a renewal) suffers meanwhile."""
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(period)
            self.loop_stall_ms.append(max(0.0, (loop.time() - t0 - period) * 1000))


async def run_dashboard(
    url: str, seconds: float, probe: Probe, *, busy_worker: bool = False
) -> dict[str, Any]:
    """Run the dashboard over the seeded board for `seconds`; return its figures.

    With `busy_worker`, the fleet embeds one worker (lease 1.5 s) holding 8 CPU-busy
    handlers, as `taskboard-tui --workers 1` would, and the result carries its renewal
    lateness samples under "lateness".
    """
    from tb_kinds import bench_registry

    registry = bench_registry()
    settings = WorkerSettings(worker_id="bench-dash")
    if busy_worker:
        settings = WorkerSettings(lease_seconds=LATENESS_LEASE, drain_seconds=0.5)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await enqueue_many(conn, registry, [
                NewJob("bench_busy", {"seconds": seconds + 60, "slice_ms": 2})
                for _ in range(BUSY_HANDLERS)])
    fleet = Fleet(Database(url), None, registry, settings=settings, name_prefix="bench")
    await fleet.start(1 if busy_worker else 0)
    proc = psutil.Process(os.getpid())
    app = TaskboardApp(fleet, refresh_seconds=1.0)
    probe.wrap(app, fleet)
    watcher = asyncio.ensure_future(probe.watch_loop())
    lateness: list[float] = []
    try:
        async with app.run_test(size=SIZE) as pilot, await psycopg.AsyncConnection.connect(
            url, autocommit=True
        ) as conn:
            while len(probe.refresh_done) < 2:
                await pilot.pause(0.05)
            embedded = [fleet.workers[w] for w in fleet.embedded_worker_ids()]
            for worker in embedded:  # from here on: the dashboard is up and rendering
                worker.counters.renewal_lateness.clear()
            cpu0, wall0 = proc.cpu_times(), time.monotonic()
            first = len(probe.refresh_done)
            end = wall0 + seconds
            while time.monotonic() < end:
                await conn.execute(HEARTBEAT)
                await pilot.pause(0.5)
            cpu1, wall1 = proc.cpu_times(), time.monotonic()
            for worker in embedded:
                lateness += list(worker.counters.renewal_lateness)
                if worker.in_flight < BUSY_HANDLERS:
                    raise RuntimeError(f"the embedded worker held {worker.in_flight} jobs, "
                                       f"not {BUSY_HANDLERS}: the measurement is void")
    finally:
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher
        await fleet.close()
    done = probe.refresh_done[first:]
    intervals = [b - a for a, b in itertools.pairwise(done)]
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {
        "refreshes": len(done),
        "interval_p50": pct(intervals, 0.5),
        "interval_max": max(intervals) if intervals else float("nan"),
        "read_p50": pct(probe.read_ms, 0.5),
        "frame_p50": pct(probe.frame_ms, 0.5),
        "frame_p99": pct(probe.frame_ms, 0.99),
        "stall_p99": pct(probe.loop_stall_ms, 0.99),
        "stall_max": max(probe.loop_stall_ms) if probe.loop_stall_ms else float("nan"),
        "cpu_share": cpu / (wall1 - wall0),
        "lateness": lateness,
    }


async def main_async(args: argparse.Namespace) -> None:
    server = BenchServer()
    server.start()
    rows: list[dict[str, Any]] = []
    lateness: list[float] = []
    try:
        for run in range(1, args.runs + 1):
            name, url = server.fresh_database("dashboard")
            try:
                log(f"dashboard run {run}/{args.runs}: {CLAIMS} claims, {WORKERS} workers, "
                    f"{args.seconds:g} s")
                await seed(url)
                rows.append(await run_dashboard(url, args.seconds, Probe()))
            finally:
                server.drop_database(name)
            name, url = server.fresh_database("dashboard-lateness")
            try:
                log(f"renewal lateness of an embedded worker with {BUSY_HANDLERS} busy handlers "
                    f"while the dashboard renders {CLAIMS} claims, run {run}")
                await seed(url)
                busy = await run_dashboard(url, args.seconds, Probe(), busy_worker=True)
                lateness += busy["lateness"]
            finally:
                server.drop_database(name)
    finally:
        server.stop()
    print(f"\n## Dashboard with {CLAIMS} claims across {WORKERS} workers "
          f"({args.runs} runs x {args.seconds:g} s, {SIZE[0]}x{SIZE[1]}, cores {os.cpu_count()})\n")
    print("| figure | median | min | max |")
    print("|---|---|---|---|")
    labels = {
        "refreshes": "refreshes in the window",
        "interval_p50": "refresh interval p50 (s, target 1.0)",
        "interval_max": "refresh interval max (s)",
        "read_p50": "board read p50 (ms)",
        "frame_p50": "frame: apply snapshot p50 (ms)",
        "frame_p99": "frame: apply snapshot p99 (ms)",
        "stall_p99": "event-loop stall p99 (ms)",
        "stall_max": "event-loop stall max (ms)",
        "cpu_share": "CPU share of one core",
    }
    for key, label in labels.items():
        values = [r[key] for r in rows]
        print(f"| {label} | {statistics.median(values):.3g} | {min(values):.3g} | "
              f"{max(values):.3g} |")
    ms = [x * 1000 for x in lateness]
    print(f"\nRenewal lateness of a worker embedded in the dashboard's fleet (its own thread, "
          f"{BUSY_HANDLERS} CPU-busy handlers, lease {LATENESS_LEASE:g} s) while the "
          f"dashboard renders {CLAIMS} claims: p50 {pct(ms, 0.5):.1f} ms, p99 {pct(ms, 0.99):.1f} ms, "
          f"max {max(ms) if ms else float('nan'):.1f} ms over {len(ms)} renewals "
          f"(target p99 < 100 ms).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one short run (plumbing check)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.runs = 8.0, 1
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
