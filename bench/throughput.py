"""Processing rate of no-op jobs: every system at its defaults and at its best, 1 and 2 workers,
at each added round trip between the workers and PostgreSQL.

Per run: a fresh database, N worker processes started and settled, then 20,000 no-op jobs
enqueued in one batch; the clock starts when the enqueue commits and stops when the
database records the last job finished, or at a cap (30 s): a system that has not finished
by then is rated by what it finished. Beside the rate: statements per job seen by
pg_stat_statements, and CPU per job in the worker processes, in PostgreSQL and in the
latency proxy, which is where the time goes on a machine this small.

Configurations (every row names its own):
- each system with no options (its defaults, as its CLI or docs run it);
- the peers at 8 in flight per worker (the configuration older tables compared with);
- each system at its best: before the timed runs at each round trip, a grid of
  configurations is tried once each with one worker (the search table lists them all) and
  the fastest is measured like the others. The grids: PgQueuer batch 10/25/50/100/250/500 with no
  concurrency cap and the 8-in-flight setting, per driver; procrastinate concurrency
  1/8/16/32/64; Taskboard `--concurrency` 64/128/256/512/1024 when its runner takes the option,
  else pool 20/40;
- with `--floor`, the floor (bench/runners/floor_runner.py, psycopg and asyncpg, batches of
  100 and 1000): a bare leased queue in Python, never counted as a peer; the targets table
  prints each ask (TARGET_RATIO x the faster peer at its best) beside it.
Runs of all configurations are interleaved (run 1 of each, then run 2 of each...), so a
slow minute on a shared machine does not land on one system only.

    uv run --group bench python bench/throughput.py --runs 3 [--rtt 0,0.5,2] [--busy N] [--floor]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

from common import (
    BenchServer,
    Link,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    cpu_snapshot,
    cpu_used,
    foreign_cores,
    foreign_mark,
    host_mode,
    is_harness_query,
    link,
    loadavg,
    log,
    main_for,
    median,
    rtt_label,
    rtts,
    running_workers,
    selected,
    spread,
    wait_for_quiet,
)
from systems import (
    FLOOR_ASYNCPG,
    FLOOR_PSYCOPG,
    PGQUEUER,
    PGQUEUER_DEFAULTS,
    PGQUEUER_PSYCOPG,
    PGQUEUER_PSYCOPG_DEFAULTS,
    PROCRASTINATE,
    PROCRASTINATE_DEFAULTS,
    Flavor,
    fresh_system,
    runner_argv,
    taskboard_flavors,
    taskboard_runner_options,
)

JOBS = 20_000
QUICK_JOBS = 2_000
CAP = 30.0  # seconds: the longest timed drain
QUICK_CAP = 8.0
SEARCH_CAP = 10.0
QUICK_SEARCH_CAP = 4.0
MARK = "bench:remaining"
# Issue 25 withdrew issue 12's 5x (beyond two shared cores: see the README) for 1.2x.
TARGET_RATIO = 1.2
TARGET_RTTS = (0.0, 2.0)
TARGET_RATE = 10_000
# The floor drains 20k jobs in ~0.3 s, near the progress poll's resolution: it gets more.
FLOOR_JOBS_FACTOR = 5


def jobs_for(flavor: Flavor, jobs: int) -> int:
    """Jobs per run for `flavor`: the floor's runs are longer so they can be timed."""
    return jobs * FLOOR_JOBS_FACTOR if flavor.system == "floor" else jobs


def add_floor_option(p: argparse.ArgumentParser) -> None:
    """`--floor`: also measure bench/runners/floor_runner.py (run_all passes it through)."""
    p.add_argument("--floor", action="store_true",
                   help="also measure the floor: a bare leased queue in Python "
                        "(bench/runners/floor_runner.py), batches of 100 and 1000, psycopg "
                        "and asyncpg; shown beside the ask, never a peer")


async def one_run(server: BenchServer, flavor: Flavor, workers: int, jobs: int,
                  extra: tuple[str, ...] = (), *, net: Link | None = None,
                  cap: float | None = None, io_ms: float = 0.0,
                  analyze: bool = False) -> dict[str, float]:
    """One timed drain of `jobs` no-op jobs by `workers` processes.

    `net`: how the workers reach the server (None: the harness's unix socket, as before
    the proxy existed). `cap`: stop the clock after this many seconds and rate what finished.
    `io_ms`: jobs that each await this many milliseconds instead of no-ops (bench/issue25.py).
    `analyze`: ANALYZE the database right after the enqueue (`--analyze`), as autovacuum does
    within a minute of it: the workers' cached plans are then made with real statistics.
    """
    async with fresh_system(server, flavor, f"tp{workers}") as (dbname, url, client):
        board = StartBoard()
        worker_url = net.url(dbname) if net is not None else url
        procs = [WorkerProcess(f"{flavor.system}-tp{workers}-w{i}",
                               runner_argv(flavor, worker_url, f"w{i}", *extra), board)
                 for i in range(workers)]
        client.remaining_sql = f"/* {MARK} */ " + client.remaining_sql
        load_start = loadavg()
        async with running_workers(procs):
            pg_before = cpu_snapshot(server.postgres_pids())
            w_before = sum(p.cpu_seconds() for p in procs)
            proxy_before = net.proxy_cpu() if net is not None else 0.0
            server.reset_statements()
            if io_ms:
                await client.enqueue_io(jobs, io_ms)
            else:
                await client.enqueue_noops(jobs)
            if analyze:
                await client.analyze()
            # CPU is counted from here, as the clock: the enqueue (and an ANALYZE) is the
            # harness's work, its server CPU reported on its own (enqueue_pg_cpu_ms).
            pg_start = cpu_snapshot(server.postgres_pids())
            w_start = sum(p.cpu_seconds() for p in procs)
            t0 = time.monotonic()
            mark = foreign_mark()
            t1, finished = await _wait_finished(client, jobs, t0 + (cap or jobs / 20 + 120))
            foreign = foreign_cores(mark)
            w_cpu = sum(p.cpu_seconds() for p in procs) - w_start
            pg_cpu = cpu_used(pg_start, cpu_snapshot(server.postgres_pids()))
            enqueue_pg_cpu = cpu_used(pg_before, pg_start)
            enqueue_w_cpu = w_start - w_before
            proxy_cpu = (net.proxy_cpu() if net is not None else 0.0) - proxy_before
            statements = [s for s in server.statements(dbname)
                          if not is_harness_query(s.query, client.remaining_sql)]
    if finished == 0:
        raise RuntimeError(f"{flavor.name}: no job finished in {t1 - t0:.0f} s")
    elapsed = t1 - t0
    return {
        "rate": finished / elapsed,
        "seconds": elapsed,
        "finished": finished,
        "jobs": jobs,
        "statements_per_job": sum(s.calls for s in statements) / finished,
        "worker_cpu_ms": 1000 * w_cpu / finished,
        "pg_cpu_ms": 1000 * pg_cpu / finished,
        # Per job enqueued: the server's CPU while the harness enqueued (and ANALYZEd) them,
        # and the workers' meanwhile (waiting: no job is claimable before the commit).
        "enqueue_pg_cpu_ms": 1000 * enqueue_pg_cpu / jobs,
        "enqueue_worker_cpu_ms": 1000 * enqueue_w_cpu / jobs,
        "proxy_cpu_ms": 1000 * proxy_cpu / finished,
        "foreign": foreign,
        "load_start": float(load_start.split(" / ")[0]) if load_start != "?" else float("nan"),
        "load_end": _load1(),
    }


def _load1() -> float:
    avg = loadavg()
    return float(avg.split(" / ")[0]) if avg != "?" else float("nan")


async def _wait_finished(client: Any, jobs: int, stop_at: float) -> tuple[float, int]:
    """(monotonic time, jobs finished) when none is left unfinished, or at `stop_at`.

    A count over a 20k-row table costs milliseconds of server CPU (procrastinate's status
    scan ~4 ms), so it is not run in a tight loop: the next poll comes after a quarter of
    the time the rate so far says the rest will take (between 20 and 250 ms). A drain of
    2 s is then timed to within ~20 ms, not to the 250 ms of a fixed interval.
    """
    started = time.monotonic()
    while True:
        left = await client.remaining()
        now = time.monotonic()
        if left == 0 or now >= stop_at:
            return now, jobs - left
        done = jobs - left
        rest = left * (now - started) / done if done else float("inf")
        pause = min(0.25, max(0.02, rest / 4))
        await asyncio.sleep(max(0.0, min(pause, stop_at - now)))


async def _wait_drained(client: Any, jobs: int) -> float:
    """Monotonic time when no job is left unfinished (bench/big_table.py and
    bench/profile_taskboard.py time their drains with it)."""
    t, finished = await _wait_finished(client, jobs, time.monotonic() + jobs / 20 + 120)
    if finished < jobs:
        raise TimeoutError(f"{jobs - finished} of {jobs} jobs still unfinished")
    return t


# --- configurations ------------------------------------------------------------------------


@dataclass
class Lineup:
    """The configurations of one system measured at one round trip."""

    system: str
    defaults: list[Flavor]  # one per driver
    fixed: list[Flavor]  # the peers at 8 in flight
    grid: list[Flavor]  # candidates for "best", defaults and fixed included
    best: list[Flavor]  # filled by the search (one per driver)

    def measured(self) -> list[Flavor]:
        out: list[Flavor] = []
        for flavor in [*self.defaults, *self.fixed, *self.best]:
            if flavor not in out:
                out.append(flavor)
        return out


def lineups(args: argparse.Namespace) -> list[Lineup]:
    """Every selected system's defaults, fixed comparison point and search grid."""
    quick = args.quick
    out = []
    for system in selected(args):
        if system == "taskboard":
            # One lineup per checkout (--taskboard-root), else the bench's own.
            for defaults in taskboard_flavors(getattr(args, "taskboard_root", [])):
                if "--concurrency" in taskboard_runner_options():
                    values = (64,) if quick else (64, 128, 256, 512, 1024)
                    grid = [defaults.but(f"pool 10, --concurrency {c}", "--concurrency", str(c))
                            for c in values]
                else:
                    values = (20,) if quick else (20, 40)
                    grid = [defaults.but(f"pool {p} ({p - 2} in flight)", "--pool-size", str(p))
                            for p in values]
                # --tracing: the same defaults with an OpenTelemetry SDK recording every span
                # and exporting it nowhere, beside the rows without one (the API's no-op).
                traced = ([defaults.but(f"{defaults.config}, SDK tracing to nowhere",
                                        "--tracing", "sdk")]
                          if getattr(args, "tracing", False) else [])
                out.append(Lineup(system, [defaults], traced, [defaults, *grid], []))
        elif system == "procrastinate":
            values = (16,) if quick else (16, 32, 64)
            grid = [PROCRASTINATE_DEFAULTS.but(f"concurrency {c}, pool {min(c, 30) + 2}",
                                               "--concurrency", str(c),
                                               "--pool-size", str(min(c, 30) + 2))
                    for c in values]
            out.append(Lineup(system, [PROCRASTINATE_DEFAULTS], [PROCRASTINATE],
                              [PROCRASTINATE_DEFAULTS, PROCRASTINATE, *grid], []))
        else:
            grid = []
            for defaults, fixed in ((PGQUEUER_DEFAULTS, PGQUEUER),
                                    (PGQUEUER_PSYCOPG_DEFAULTS, PGQUEUER_PSYCOPG)):
                values = (50,) if quick else (25, 50, 100, 250, 500)
                grid += [defaults, fixed]
                grid += [defaults.but(f"batch {b}, no concurrency cap", "--batch-size", str(b))
                         for b in values]
            out.append(Lineup(system, [PGQUEUER_DEFAULTS, PGQUEUER_PSYCOPG_DEFAULTS],
                              [PGQUEUER, PGQUEUER_PSYCOPG], grid, []))
    if getattr(args, "floor", False):
        grid = [flavor.but(f"batch {b}", "--batch-size", str(b))
                for flavor in (FLOOR_PSYCOPG, FLOOR_ASYNCPG) for b in (100, 1000)]
        out.append(Lineup("floor", [FLOOR_PSYCOPG, FLOOR_ASYNCPG], [], grid, []))
    return out


async def search(server: BenchServer, lineup: Lineup, net: Link, jobs: int, cap: float,
                 section: Section) -> None:
    """Try every candidate once with one worker; the fastest per driver is the best."""
    found: dict[str, tuple[float, Flavor]] = {}
    for flavor in lineup.grid:
        await wait_for_quiet()
        log(f"search: {flavor.name} at {net.label}")
        r = await one_run(server, flavor, 1, jobs_for(flavor, jobs), net=net, cap=cap)
        log(f"  {r['rate']:,.0f} jobs/s")
        section.rows.append([flavor.label, flavor.config, net.label, f"{r['rate']:,.0f}",
                             f"{r['finished']:,}/{r['jobs']:,} in {r['seconds']:.1f}s", ""])
        if flavor.label not in found or r["rate"] > found[flavor.label][0]:
            found[flavor.label] = (r["rate"], flavor)
    lineup.best = []
    for label, (_, flavor) in found.items():
        best = flavor.but(f"best found: {flavor.config}", *flavor.runner_args[
            2 if flavor.runner_args[:1] == ("--driver",) else 0:])
        # The best is measured under its own name unless it is a configuration that is
        # measured anyway (then that row is the best).
        same = next((f for f in [*lineup.defaults, *lineup.fixed]
                     if f.label == label and f.runner_args == flavor.runner_args), None)
        lineup.best.append(same or best)
        if same is not None:
            section.notes.append(f"At {net.label}, {label}'s best found is its row '{same.config}'.")
        for row in section.rows:
            if row[0] == label and row[1] == flavor.config and row[2] == net.label:
                row[5] = "best"


# --- the script ----------------------------------------------------------------------------


async def measure(server: BenchServer, args: argparse.Namespace) -> list[Section]:
    """Every configuration x {1, 2} workers x runs, at every round trip."""
    jobs = getattr(args, "jobs", 0) or (QUICK_JOBS if args.quick else JOBS)
    runs = 1 if args.quick else args.runs
    cap = QUICK_CAP if args.quick else CAP
    search_cap = QUICK_SEARCH_CAP if args.quick else SEARCH_CAP
    analyzed = ("; the database ANALYZEd right after each enqueue"
                if getattr(args, "analyze", False) else "")
    section = Section(
        f"No-op processing rate ({jobs:,} jobs per run, one batch; timed to the last job "
        f"finished or {cap:g} s{analyzed})",
        ["system", "configuration", "added RTT", "workers", "jobs/s", "seconds (finished)",
         "statements/job", "worker CPU ms/job", "PostgreSQL CPU ms/job", "proxy CPU ms/job",
         "other load, cores", "loadavg 1 min, start-end"],
    )
    found = Section(
        "Configuration search: each candidate once, 1 worker (the fastest per system and driver "
        "is measured as 'best found')",
        ["system", "configuration", "added RTT", "jobs/s", "finished", "chosen"])
    rates: dict[tuple[str, float, int], float] = {}
    # Worker + PostgreSQL CPU per job (the proxy's excluded: a network would not charge it here).
    cpu: dict[tuple[str, float, int], float] = {}
    roles: dict[tuple[str, float], dict[str, Flavor]] = {}
    for rtt in rtts(args):
        async with link(server, rtt) as net:
            ups = lineups(args)
            for lineup in ups:
                if getattr(args, "no_search", False):
                    lineup.best = []
                else:
                    await search(server, lineup, net, jobs, search_cap, found)
            for workers in (1, 2):
                results: dict[Flavor, list[dict[str, float]]] = {}
                for run in range(runs):
                    for lineup in ups:
                        for flavor in lineup.measured():
                            await wait_for_quiet()
                            log(f"throughput: {flavor.name}, {net.label}, {workers} worker(s), "
                                f"run {run + 1}/{runs}")
                            r = await one_run(server, flavor, workers, jobs_for(flavor, jobs),
                                              net=net, cap=cap,
                                              analyze=getattr(args, "analyze", False))
                            log(f"  {r['rate']:,.0f} jobs/s ({r['finished']:,} in {r['seconds']:.1f}s)")
                            results.setdefault(flavor, []).append(r)
                for flavor, rs in results.items():
                    rates[(flavor.name, rtt, workers)] = median([r["rate"] for r in rs])
                    cpu[(flavor.name, rtt, workers)] = median(
                        [r["worker_cpu_ms"] + r["pg_cpu_ms"] for r in rs])
                    section.rows.append(_row(flavor, net.label, workers, rs))
            for lineup in ups:
                for flavor in lineup.defaults:
                    roles.setdefault((flavor.label, rtt), {})["defaults"] = flavor
                for flavor in lineup.best:
                    roles.setdefault((flavor.label, rtt), {})["best"] = flavor
    section.data.update(rates=rates, roles=roles, cpu=cpu)
    section.notes += [
        "Median (min-max) over runs; each run on a fresh database. The clock starts when the "
        "batch enqueue commits and stops when the database shows no unfinished job, or at the "
        "cap; 'seconds (finished)' shows how many jobs a capped run finished.",
        "Workers reach PostgreSQL over TCP loopback: directly at 0 ms, through "
        "bench/latency_proxy.py otherwise (see the network check for what it really adds). "
        "The harness enqueues and counts over the unix socket.",
        "Taskboard: lease 60 s, fenced claim/complete on. 'best found' is the fastest "
        "configuration of the search table at the same added RTT, searched with 1 worker and "
        "measured here with 1 and 2.",
        "statements/job counts every statement the workers ran in the database "
        "(pg_stat_statements), the harness's progress polls excluded. CPU per job is counted "
        "from the enqueue's commit to the end of the drain, as the clock: the enqueue is not in "
        "it (issue25.py prints its server CPU on its own). proxy CPU: the proxy "
        "process, which a real network would not charge to this machine.",
        "other load: cores used by processes outside the bench during the run (a shared "
        "machine); runs with load above ~0.2 cores are slower than the machine allows.",
    ]
    if getattr(args, "floor", False):
        section.notes.append(
            f"Floor: bench/runners/floor_runner.py, a bare leased queue in Python (one "
            f"statement per batch acks the last batch, fenced on its token, and claims the "
            f"next; a function call per job; no tasks, renewal, history or counts). Not a "
            f"peer: it shows what any Python worker could reach here. Its runs drain "
            f"{FLOOR_JOBS_FACTOR}x the jobs so that they last long enough to be timed.")
    section.targets += throughput_targets(rates, roles, args)
    return [section, found] if found.rows else [section]


def _row(flavor: Flavor, rtt: str, workers: int, rs: list[dict[str, float]]) -> list[str]:
    capped = [r for r in rs if r["finished"] < r["jobs"]]
    seconds = spread([r["seconds"] for r in rs], "{:.1f}")
    if capped:
        seconds += f" ({spread([r['finished'] for r in capped])} of {int(rs[0]['jobs']):,} in "
        seconds += f"{len(capped)} capped run(s))"
    return [
        flavor.label, flavor.config, rtt, str(workers),
        spread([r["rate"] for r in rs]),
        seconds,
        spread([r["statements_per_job"] for r in rs], "{:.2f}"),
        spread([r["worker_cpu_ms"] for r in rs], "{:.3f}"),
        spread([r["pg_cpu_ms"] for r in rs], "{:.3f}"),
        spread([r["proxy_cpu_ms"] for r in rs], "{:.3f}") if any(r["proxy_cpu_ms"] for r in rs) else "—",
        spread([r["foreign"] for r in rs], "{:.2f}"),
        ", ".join(f"{r['load_start']:.2f}-{r['load_end']:.2f}" for r in rs),
    ]


def fastest_peer(rates: dict[tuple[str, float, int], float], rtt: float,
                 workers: int) -> tuple[str, float] | None:
    """The fastest peer (name, jobs/s) measured at `rtt` with `workers`, if any."""
    peers = {name: v for (name, r, w), v in rates.items()
             if r == rtt and w == workers and not name.startswith(("Taskboard", "Floor"))}
    return max(peers.items(), key=lambda kv: kv[1]) if peers else None


def throughput_targets(rates: dict[tuple[str, float, int], float],
                       roles: dict[tuple[str, float], dict[str, Flavor]],
                       args: argparse.Namespace) -> list[Target]:
    """No-op processing >= TARGET_RATIO x the faster peer at its best; >= 10,000 jobs/s with
    2 workers."""
    out = []
    checkouts = sorted({label for (label, _) in roles if label.startswith("Taskboard")})
    for label, rtt in sorted({(label, r) for (_, r, _) in rates for label in checkouts}):
        tb = roles.get((label, rtt), {})
        for workers in (1, 2):
            fastest = fastest_peer(rates, rtt, workers)
            if not tb or fastest is None:
                continue
            peer_name, peer = fastest
            for role in ("defaults", "best"):
                flavor = tb.get(role)
                if flavor is None or (role == "best" and flavor == tb.get("defaults")):
                    continue
                rate = rates.get((flavor.name, rtt, workers))
                if rate is None:
                    continue
                ratio = rate / peer
                judged = rtt in TARGET_RTTS
                out.append(Target(
                    f"no-op processing, {label} {flavor.config}, {workers} worker(s), "
                    f"{rtt_label(rtt)} added RTT",
                    f">= {TARGET_RATIO:g}x the faster peer at its best"
                    + ("" if judged else " (not a target RTT: shown only)"),
                    f"{ratio:.2f}x {peer_name} ({rate:,.0f} vs {peer:,.0f} jobs/s)"
                    + ("" if ratio >= TARGET_RATIO else
                       f"; short by {TARGET_RATIO * peer - rate:,.0f} jobs/s "
                       f"({TARGET_RATIO * peer / rate:.2f}x more needed)"),
                    (ratio >= TARGET_RATIO) if judged else None,
                ))
    out += _floor_targets(rates, roles)
    for label, role in [(label, role) for label in checkouts for role in ("defaults", "best")]:
        flavor = roles.get((label, 0.0), {}).get(role)
        if flavor is None or (role == "best" and flavor == roles[(label, 0.0)].get("defaults")):
            continue
        rate = rates.get((flavor.name, 0.0, 2))
        if rate is None:
            continue
        idle_two_cores = os.cpu_count() == 2 and not getattr(args, "busy", 0)
        out.append(Target(
            f"no-op processing, {label} {flavor.config}, 2 workers, 0 ms",
            f">= {TARGET_RATE:,} jobs/s on an idle 2-core machine",
            f"{rate:,.0f} jobs/s ({os.cpu_count()} cores, {host_mode().split(':')[0]})"
            + ("" if rate >= TARGET_RATE else f"; short by {TARGET_RATE - rate:,.0f}"),
            (rate >= TARGET_RATE) if idle_two_cores else None,
        ))
    return out


def _floor_targets(rates: dict[tuple[str, float, int], float],
                   roles: dict[tuple[str, float], dict[str, Flavor]]) -> list[Target]:
    """What the ask is worth: the floor's fastest row beside it, per RTT and workers."""
    out = []
    for rtt in sorted({r for (_, r, _) in rates}):
        floors = [f for (label, r), by_role in roles.items() if r == rtt and label.startswith("Floor")
                  for f in by_role.values()]
        for workers in (1, 2):
            fastest = fastest_peer(rates, rtt, workers)
            measured = [(rates[(f.name, rtt, workers)], f) for f in floors
                        if (f.name, rtt, workers) in rates]
            if fastest is None or not measured:
                continue
            rate, flavor = max(measured, key=lambda m: m[0])
            asked = TARGET_RATIO * fastest[1]
            out.append(Target(
                f"the floor (a bare leased queue in Python), {workers} worker(s), "
                f"{rtt_label(rtt)} added RTT",
                f"shown only: what {TARGET_RATIO:g}x the faster peer at its best asks",
                f"{flavor.name}: {rate:,.0f} jobs/s = {rate / fastest[1]:.2f}x {fastest[0]}; "
                f"the ask is {asked:,.0f} ({asked / rate:.2f}x the floor)",
                None,
            ))
    return out


def parser() -> argparse.ArgumentParser:
    p = base_parser(__doc__.splitlines()[0], rtt=True)
    p.add_argument("--jobs", type=int, default=0, help=f"jobs per run (default {JOBS:,})")
    p.add_argument("--no-search", action="store_true",
                   help="skip the configuration search (defaults and 8-in-flight rows only)")
    add_floor_option(p)
    p.add_argument("--tracing", action="store_true",
                   help="also Taskboard's defaults with an OpenTelemetry SDK exporting nowhere")
    p.add_argument("--taskboard-root", action="append", default=[], metavar="PATH",
                   help="measure Taskboard from this checkout (repeat to put checkouts side by "
                        "side; default: this one)")
    p.add_argument("--analyze", action="store_true",
                   help="ANALYZE each run's database right after its enqueue (what autovacuum "
                        "does within a minute; the runs are otherwise younger than that)")
    return p


if __name__ == "__main__":
    main_for(measure, parser())
