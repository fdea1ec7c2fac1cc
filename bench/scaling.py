"""Many Taskboard workers on one database: 1, 2, 4 and 8 worker processes, each with a small pool.

For each number of workers (and each added round trip), per run:

1. Throughput: a fresh database, the workers started and settled, 40,000 no-op jobs in one
   batch, timed from the enqueue's commit to the last job finished (or a 30 s cap).
2. Renewal lateness and reclaim lag: a fresh database, the workers with a 3 s lease
   (renewal every 1 s); one long job per worker (four with `--concurrency`, whose slots
   hold no connection), then a stream of no-op jobs kept flowing for 15 s, so every
   worker renews its long jobs while it claims and completes others. Each worker reports
   its renewal lateness (tick ran minus tick due) as it goes. Then the worker holding the
   most long jobs is SIGKILLed; their lease deadlines are read from the database, and
   the reclaim lag is how long after its deadline each job's handler starts again on a
   survivor. With one worker there is no survivor: a new worker is started just after the
   kill (its start takes well under the 2-3 s left on the lease; a row says if it did not).
3. Connections: pg_stat_activity sampled every 0.1 s in both phases; the most TCP
   connections seen to the database (the workers'; the harness uses the unix socket).

Workers are bench/runners/scaling_runner.py (taskboard_runner.py's worker plus the
lateness report), pool `--pool-size` (default 4), and `--concurrency` when the engine has it.

    uv run --group bench python bench/scaling.py --runs 3 [--rtt 0,0.5,2] [--busy N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import psycopg
from common import (
    BenchServer,
    Link,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    link,
    loadavg,
    log,
    main_for,
    percentile,
    rtts,
    running_workers,
    spread,
    wait_for_quiet,
)
from systems import (
    RUNNERS_DIR,
    TASKBOARD,
    TaskboardClient,
    fresh_system,
    taskboard_concurrency_default,
)
from throughput import _wait_finished

COUNTS = (1, 2, 4, 8)
POOL = 4
JOBS = 40_000
QUICK_JOBS = 4_000
CAP = 30.0
QUICK_CAP = 8.0
LEASE = 3.0
WINDOW = 15.0
QUICK_WINDOW = 4.0
FEED_BATCH = 2_000
TARGET_MS = 100.0
# What the dashboard needs beside the workers it embeds: its own connection for the board
# (core/fleet/opening.py budgets workers x pool + 1 before it opens anything).
DASHBOARD_CONNECTIONS = 1
SCALING_RUNNER = RUNNERS_DIR / "scaling_runner.py"
CONNECTIONS_SQL = ("SELECT count(*) FROM pg_stat_activity "
                   "WHERE datname = %s AND client_addr IS NOT NULL")


@dataclass
class Config:
    """How every worker of the measurement runs."""

    pool: int
    concurrency: int | None  # None: the engine has no such setting

    def argv(self, url: str, worker_id: str, lease: float) -> list[str]:
        out = [str(SCALING_RUNNER), "--url", url, "--id", worker_id, "--lease", f"{lease:g}",
               "--pool-size", str(self.pool)]
        if self.concurrency:
            out += ["--concurrency", str(self.concurrency)]
        return out

    @property
    def text(self) -> str:
        extra = f", concurrency {self.concurrency}" if self.concurrency else ""
        return f"pool {self.pool}{extra}"


@dataclass
class Tally:
    """Everything measured for one number of workers at one round trip."""

    rates: list[float] = field(default_factory=list)
    capped: int = 0
    lateness_ms: list[float] = field(default_factory=list)
    lag_ms: list[float] = field(default_factory=list)
    late_starts: int = 0  # N=1: the replacement was not up before the deadline
    unreclaimed: int = 0
    conns_drain: list[int] = field(default_factory=list)
    conns_renew: list[int] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)


class ConnectionWatch:
    """The most worker connections to one database seen while the block runs."""

    def __init__(self, admin_url: str, dbname: str) -> None:
        self.admin_url = admin_url
        self.dbname = dbname
        self.most = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ConnectionWatch:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    async def _run(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.admin_url, autocommit=True) as conn:
            while True:
                cur = await conn.execute(CONNECTIONS_SQL, (self.dbname,))
                row = await cur.fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                await asyncio.sleep(0.1)


async def drain_phase(server: BenchServer, net: Link, cfg: Config, workers: int, jobs: int,
                      cap: float, tally: Tally) -> None:
    """Phase 1: the no-op rate of `workers` processes, and their connections meanwhile."""
    async with fresh_system(server, TASKBOARD, f"sc{workers}") as (dbname, url, client):
        procs = [WorkerProcess(f"taskboard-sc{workers}-w{i}",
                               cfg.argv(net.url(dbname), f"w{i}", 60.0), StartBoard())
                 for i in range(workers)]
        async with running_workers(procs), ConnectionWatch(url, dbname) as watch:
            await client.enqueue_noops(jobs)
            t0 = time.monotonic()
            t1, finished = await _wait_finished(client, jobs, t0 + cap)
        tally.rates.append(finished / (t1 - t0))
        tally.capped += finished < jobs
        tally.conns_drain.append(watch.most)


async def _feed(client: TaskboardClient, low: int) -> None:
    """Keep at least `low` no-op jobs waiting, so the workers never run dry."""
    while True:
        if await client.remaining() < low + 100:  # the long jobs count as unfinished
            await client.enqueue_noops(FEED_BATCH)
        await asyncio.sleep(0.2)


async def _ready_at(proc: WorkerProcess) -> float:
    await proc.ready.wait()
    return time.monotonic()


async def renew_phase(server: BenchServer, net: Link, cfg: Config, workers: int,
                      window: float, run: int, tally: Tally) -> None:
    """Phase 2: renewal lateness while jobs flow, then the reclaim lag after a SIGKILL."""
    holds = 4 if cfg.concurrency else 1
    async with fresh_system(server, TASKBOARD, f"sr{workers}") as (dbname, url, client):
        assert isinstance(client, TaskboardClient)
        board = StartBoard()
        procs = [WorkerProcess(f"taskboard-sr{workers}-w{i}",
                               cfg.argv(net.url(dbname), f"w{i}", LEASE), board)
                 for i in range(workers)]
        spare: WorkerProcess | None = None
        try:
            async with running_workers(procs), ConnectionWatch(url, dbname) as watch:
                keys = [f"r{run}h{i}" for i in range(workers * holds)]
                for key in keys:
                    await client.enqueue_hold(key, 3600)
                for key in keys:
                    await board.wait(key, timeout=60)
                feeder = asyncio.ensure_future(_feed(client, FEED_BATCH))
                try:
                    await asyncio.sleep(window)
                    tally.conns_renew.append(watch.most)
                    by_pid: dict[int, list[str]] = {}
                    for key in keys:
                        by_pid.setdefault(board.starts[key][0][1], []).append(key)
                    victim_pid, victim_keys = max(by_pid.items(), key=lambda kv: len(kv[1]))
                    victim = next(p for p in procs if p.pid == victim_pid)
                    victim.kill()
                    spare_ready: asyncio.Future[float] | None = None
                    if workers == 1:
                        spare = WorkerProcess("taskboard-sr1-spare",
                                              cfg.argv(net.url(dbname), "spare", LEASE), board)
                        await spare.start()
                        spare_ready = asyncio.ensure_future(_ready_at(spare))
                    await asyncio.sleep(0.05)  # a renewal sent just before the kill may land
                    deadlines = {}
                    for key in victim_keys:
                        sent = time.monotonic()
                        left = await client.lease_left(key)
                        if left is not None:
                            deadlines[key] = (sent + time.monotonic()) / 2 + left
                    if spare is not None and spare_ready is not None:
                        await spare.wait_ready()
                        if (await spare_ready) > min(deadlines.values(), default=float("inf")):
                            tally.late_starts += 1
                    for key, deadline in deadlines.items():
                        try:
                            starts = await board.wait(key, count=2, timeout=LEASE + 15)
                        except TimeoutError:
                            tally.unreclaimed += 1
                            continue
                        tally.lag_ms.append(1000 * (starts[1][0] - deadline))
                finally:
                    feeder.cancel()
                    with contextlib.suppress(BaseException):
                        await feeder
        finally:
            if spare is not None:
                await spare.stop()
        for proc in [*procs, *([spare] if spare else [])]:
            for line in proc.lines:
                if line.startswith("L "):
                    tally.lateness_ms += [float(x) for x in line[2:].split(",") if x]


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """Every worker count at every round trip, `runs` times each."""
    runs = 1 if args.quick else args.runs
    jobs = QUICK_JOBS if args.quick else JOBS
    cap = QUICK_CAP if args.quick else CAP
    window = QUICK_WINDOW if args.quick else WINDOW
    # run_all.py's arguments have none of this script's own options: their defaults then.
    counts = [int(n) for n in getattr(args, "workers", ",".join(map(str, COUNTS))).split(",")]
    concurrency = getattr(args, "concurrency", 0) or taskboard_concurrency_default()
    cfg = Config(getattr(args, "pool_size", POOL), concurrency)
    section = Section(
        f"Many workers on one database: Taskboard, {cfg.text} per worker process",
        ["workers", "added RTT", "no-op jobs/s", "renewal lateness p50 / p99 / max ms (samples)",
         "reclaim lag after deadline p50 / max ms (samples)",
         "worker connections, max seen (drain / renewing)", "per worker", "budget: workers x pool",
         "loadavg 1 min at runs' start"])
    tallies: dict[tuple[float, int], Tally] = {}
    for rtt in rtts(args):
        async with link(server, rtt) as net:
            for run in range(runs):
                for workers in counts:
                    tally = tallies.setdefault((rtt, workers), Tally())
                    await wait_for_quiet()
                    tally.loads.append(loadavg().split(" / ")[0])
                    log(f"scaling: {workers} worker(s), {net.label}, run {run + 1}/{runs}: drain")
                    await drain_phase(server, net, cfg, workers, jobs, cap, tally)
                    log(f"  {tally.rates[-1]:,.0f} jobs/s, {tally.conns_drain[-1]} connections")
                    await wait_for_quiet()
                    log(f"scaling: {workers} worker(s), {net.label}, run {run + 1}/{runs}: "
                        "renewals and reclaim")
                    await renew_phase(server, net, cfg, workers, window, run, tally)
                    log(f"  lateness p99 so far {percentile(tally.lateness_ms, 99):.1f} ms, "
                        f"reclaim lags {[f'{x:.0f}' for x in tally.lag_ms]} ms")
    for (rtt, workers), t in tallies.items():
        late = t.lateness_ms
        lags = t.lag_ms
        lag_text = (f"{percentile(lags, 50):.0f} / {max(lags):.0f} ({len(lags)})" if lags else "n/a")
        if t.unreclaimed:
            lag_text += f"; {t.unreclaimed} not reclaimed within {LEASE + 15:g} s"
        if t.late_starts:
            lag_text += f"; the new worker was up after the deadline in {t.late_starts} run(s)"
        conns = f"{spread(t.conns_drain)} / {spread(t.conns_renew)}"
        per = spread([c / workers for c in t.conns_drain + t.conns_renew], "{:.1f}")
        rate = spread(t.rates) + (f" ({t.capped} run(s) capped at {cap:g} s)" if t.capped else "")
        section.rows.append([
            str(workers), f"{rtt:g} ms", rate,
            (f"{percentile(late, 50):.1f} / {percentile(late, 99):.1f} / {max(late):.1f} "
             f"({len(late)})") if late else "n/a",
            lag_text, conns, per, str(workers * cfg.pool), ", ".join(t.loads)])
        if workers == max(counts):
            p99 = percentile(late, 99)
            section.targets.append(Target(
                f"{workers} workers, {rtt:g} ms: renewal lateness p99", f"< {TARGET_MS:g} ms",
                f"{p99:.1f} ms over {len(late)} ticks", p99 < TARGET_MS if late else None))
            p50 = percentile(lags, 50)
            section.targets.append(Target(
                f"{workers} workers, {rtt:g} ms: reclaim lag after the deadline p50",
                f"< {TARGET_MS:g} ms", f"{p50:.0f} ms over {len(lags)} reclaimed jobs"
                if lags else "no job reclaimed", (p50 < TARGET_MS) if lags else False))
    section.data["tallies"] = tallies
    section.notes += [
        f"Throughput: {jobs:,} no-op jobs per run, median (min-max) over {runs} run(s). "
        f"Lateness and lag: samples pooled over the runs. Lease {LEASE:g} s in the renewal "
        f"phase ({WINDOW if not args.quick else QUICK_WINDOW:g} s of flow per run), 60 s in "
        "the drain phase.",
        "Connections: the most TCP backends pg_stat_activity showed for the database (the "
        "workers reach it over TCP, the harness over the unix socket). Budget for a "
        f"deployment: workers x pool size + {DASHBOARD_CONNECTIONS} for a dashboard "
        "(core/fleet/opening.py refuses to start a fleet the server has no room for on that "
        "count) + the application's own.",
    ]
    return section


def parser() -> argparse.ArgumentParser:
    p = base_parser(__doc__.splitlines()[0], rtt=True)
    p.add_argument("--workers", default=",".join(map(str, COUNTS)),
                   help="comma-separated worker process counts (default 1,2,4,8)")
    p.add_argument("--pool-size", type=int, default=POOL, help=f"pool per worker (default {POOL})")
    p.add_argument("--concurrency", type=int, default=0,
                   help="Taskboard --concurrency for connection-free handlers (default: the "
                        "engine's, when it has the setting)")
    return p


if __name__ == "__main__":
    main_for(measure, parser())
