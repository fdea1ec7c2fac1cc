"""Renewal cost and renewal lateness.

Cost: one worker process holds 1 or 8 long jobs; every statement it sends during a window
is counted server-side by pg_stat_statements. The liveness statements (Taskboard's lease
renewal, PgQueuer's heartbeat flush, procrastinate's worker heartbeat) are reported per
renewal interval, with every system set to a 1 s interval so the windows compare:
Taskboard lease 3 s (renews every lease/3), PgQueuer heartbeat_timeout 2 s (beats every
timeout/2), procrastinate update_heartbeat_interval 1 s. The target: one renewal statement
per worker per interval whatever the number in flight.

Lateness (Taskboard only): an in-process `Worker` records, for every renewal tick, how late
the tick ran compared with its schedule (`Worker.counters.renewal_lateness`). Measured with
8 sleeping handlers, with 8 CPU-busy handlers, and while draining a stream of no-op jobs.

`measure_renewal_lateness(..., alongside=...)` runs any coroutine in the same event loop as
the worker, and `EXTRA_LATENESS_SCENARIOS` adds rows to this table. The dashboard's own
figure is measured by bench/dashboard.py, with the worker embedded in the dashboard's fleet
(its own thread), as `taskboard-tui` runs it.

    uv run --group bench python bench/renewal.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import psycopg
from common import (
    BenchServer,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    log,
    main_for,
    percentile,
    running_workers,
    selected,
    spread,
    wait_for_quiet,
)
from systems import DEFAULT_FLAVORS, fresh_system, runner_argv
from taskboard.core.engine.schema import migrate
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.queue.jobs import NewJob, enqueue_many

WINDOW = 10.0
QUICK_WINDOW = 3.0
LATENESS_SECONDS = 20.0
QUICK_LATENESS_SECONDS = 4.0
LATENESS_LEASE = 1.5  # renew every 0.5 s: many ticks per run, still 3 ticks of slack


# --- cost ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostSetup:
    """How one system is set to a 1 s renewal interval, and which statements are liveness."""

    args: tuple[str, ...]
    settings: str
    is_liveness: Callable[[str], bool]


COST_SETUPS = {
    "taskboard": CostSetup(
        ("--lease", "3"), "lease 3 s, renewal every 1 s",
        lambda q: q.startswith("UPDATE taskboard_jobs") and "SET lease_expires_at = now()" in q),
    "procrastinate": CostSetup(
        ("--heartbeat", "1"), "update_heartbeat_interval 1 s (worker heartbeat)",
        lambda q: "procrastinate_update_heartbeat" in q),
    "pgqueuer": CostSetup(
        ("--heartbeat-timeout", "2"), "heartbeat_timeout 2 s (beats every 1 s, buffer flush 0.25 s)",
        lambda q: q.upper().startswith("UPDATE") and "HEARTBEAT" in q.upper()),
}


async def cost_run(server: BenchServer, system: str, in_flight: int, window: float) -> dict[str, float]:
    """Statements one worker sends while holding `in_flight` long jobs for `window` seconds."""
    flavor = DEFAULT_FLAVORS[system]
    setup = COST_SETUPS[system]
    async with fresh_system(server, flavor, "ren") as (dbname, url, client):
        board = StartBoard()
        procs = [WorkerProcess(f"{system}-ren", runner_argv(flavor, url, "w0", *setup.args), board)]
        async with running_workers(procs):
            for i in range(in_flight):
                await client.enqueue_hold(f"h{i}", 3600)
            for i in range(in_flight):
                await board.wait(f"h{i}", timeout=30)
            await asyncio.sleep(1.5)  # past the first renewal of every job
            server.reset_statements()
            await asyncio.sleep(window)
            statements = server.statements(dbname)
    live = sum(s.calls for s in statements if setup.is_liveness(s.query))
    return {"liveness_per_interval": live / window,  # the interval is 1 s for every system
            "all_per_second": sum(s.calls for s in statements) / window}


# --- lateness --------------------------------------------------------------------------

Alongside = Callable[[Worker], Awaitable[None]]


async def measure_renewal_lateness(
    url: str,
    *,
    seconds: float,
    handlers: str = "busy",
    in_flight: int = 8,
    lease: float = LATENESS_LEASE,
    alongside: Alongside | None = None,
) -> list[float]:
    """Run one in-process Taskboard worker for `seconds`; return its renewal lateness samples.

    `url` is a database with Taskboard's schema. `handlers` picks what the worker is busy
    with: "idle" (`in_flight` sleeping handlers), "busy" (`in_flight` handlers burning CPU
    in 2 ms slices, so the event loop is never idle) or "churn" (draining a stream of no-op
    jobs at full speed). `alongside`, if given, is called with the worker once it has
    started and runs as a task in the same event loop until the measurement ends (it is
    then cancelled): the dashboard engineer passes a coroutine that drives the dashboard
    here, so its rendering competes with the renewal timer as it does in `taskboard-tui`.

    Samples are seconds (actual minus scheduled renewal tick).
    """
    from tb_kinds import bench_registry

    registry = bench_registry()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)
        if handlers == "idle":
            jobs = [NewJob("sleep", {"seconds": seconds + 30}) for _ in range(in_flight)]
        elif handlers == "busy":
            jobs = [NewJob("bench_busy", {"seconds": seconds + 30, "slice_ms": 2})
                    for _ in range(in_flight)]
        elif handlers == "churn":
            # More than the worker can drain in `seconds` on this machine, so it never idles.
            jobs = [NewJob("noop") for _ in range(int(5000 * seconds))]
        else:
            raise ValueError(f"unknown handlers mode {handlers!r}")
        await enqueue_many(conn, registry, jobs)
    worker = Worker(url, registry=registry,
                    settings=WorkerSettings(lease_seconds=lease, worker_id=f"lateness-{handlers}"))
    task = asyncio.get_running_loop().create_task(worker.run())
    side: asyncio.Task[None] | None = None
    try:
        await worker.wait_started()
        if alongside is not None:
            side = asyncio.ensure_future(alongside(worker))
        await asyncio.sleep(seconds)
        return list(worker.counters.renewal_lateness)
    finally:
        if side is not None:
            side.cancel()
            with contextlib.suppress(BaseException):
                await side
        await worker.crash()  # no drain: the database is dropped next anyway
        with contextlib.suppress(BaseException):
            await task


@dataclass(frozen=True)
class LatenessScenario:
    """A row of the lateness table."""

    name: str
    handlers: str
    alongside: Alongside | None = None


LATENESS_SCENARIOS = [
    LatenessScenario("8 handlers sleeping", "idle"),
    LatenessScenario("8 handlers CPU-busy (2 ms slices)", "busy"),
    LatenessScenario("draining no-op jobs at full speed", "churn"),
]
# More rows: LatenessScenario(name, handlers, alongside=coroutine running in the same loop).
EXTRA_LATENESS_SCENARIOS: list[LatenessScenario] = []


# --- the script ------------------------------------------------------------------------


async def measure(server: BenchServer, args: argparse.Namespace) -> list[Section]:
    """Cost for every selected system; lateness for Taskboard."""
    runs = 1 if args.quick else args.runs
    window = QUICK_WINDOW if args.quick else WINDOW
    cost = Section(
        f"Renewal cost: statements one worker sends while holding jobs ({window:g} s window, "
        "1 s renewal interval)",
        ["system", "settings", "in flight", "liveness statements / interval", "all statements / s"])
    tb_cost: dict[int, float] = {}
    for system in selected(args):
        for in_flight in (1, 8):
            results = []
            for run in range(runs):
                await wait_for_quiet()
                log(f"renewal cost: {DEFAULT_FLAVORS[system].label}, {in_flight} in flight, "
                    f"run {run + 1}/{runs}")
                results.append(await cost_run(server, system, in_flight, window))
            per = [r["liveness_per_interval"] for r in results]
            if system == "taskboard":
                tb_cost[in_flight] = max(per)
            cost.rows.append([DEFAULT_FLAVORS[system].label, COST_SETUPS[system].settings,
                              str(in_flight), spread(per, "{:.2f}"),
                              spread([r["all_per_second"] for r in results], "{:.2f}")])
    cost.notes += [
        "Counted server-side with pg_stat_statements in the worker's own database. Liveness = "
        "Taskboard's fenced RENEW; PgQueuer's heartbeat UPDATE (one per buffer flush, all jobs "
        "with `id = ANY`); procrastinate's worker heartbeat (per worker, not per job: it proves "
        "the process is alive, not that it still owns its jobs).",
        "'all statements / s' adds everything else the idle-holding worker sends: heartbeats, "
        "fallback polls, listener health checks.",
    ]
    if tb_cost:
        worst = max(tb_cost.values())
        cost.targets.append(Target(
            "Taskboard renewal statements per interval", "1 per worker whatever the number in flight",
            ", ".join(f"{v:.2f} with {k} in flight (worst run)" for k, v in sorted(tb_cost.items())),
            worst <= 1.05))  # a tick landing on the window's edge can add one in ten

    lateness = Section(
        f"Renewal lateness, Taskboard in-process worker (lease {LATENESS_LEASE:g} s, "
        f"renewal every {LATENESS_LEASE / 3:g} s)",
        ["while", "samples", "p50 ms", "p99 ms", "max ms"])
    if "taskboard" in selected(args):
        seconds = QUICK_LATENESS_SECONDS if args.quick else LATENESS_SECONDS
        worst_p99 = 0.0
        for scenario in [*LATENESS_SCENARIOS, *EXTRA_LATENESS_SCENARIOS]:
            samples: list[float] = []
            for run in range(runs):
                await wait_for_quiet()
                log(f"renewal lateness: {scenario.name}, run {run + 1}/{runs}")
                dbname, url = server.fresh_database("late")
                try:
                    samples += await measure_renewal_lateness(
                        url, seconds=seconds, handlers=scenario.handlers, alongside=scenario.alongside)
                finally:
                    server.drop_database(dbname)
            ms = [1000 * s for s in samples]
            p99 = percentile(ms, 99)
            worst_p99 = max(worst_p99, p99)
            lateness.rows.append([scenario.name, str(len(ms)), f"{percentile(ms, 50):.1f}",
                                  f"{p99:.1f}", f"{max(ms):.1f}" if ms else "n/a"])
        lateness.notes.append(
            f"Samples pooled over {runs} run(s) of {seconds:g} s; lateness = when the renewal "
            "timer actually ran minus when it was scheduled (Worker.counters.renewal_lateness).")
        lateness.targets.append(Target("Taskboard renewal lateness p99 (every scenario)", "< 100 ms",
                                       f"worst p99 {worst_p99:.1f} ms", worst_p99 < 100))
    return [cost, lateness]


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0]))
