"""Issue 25's figures in one run, side by side: Taskboard at its defaults against PgQueuer at
its best (searched on the day) and at its defaults, with the floor, CPU per job everywhere.

Sections (each can be left out with `--only`):
- `search`: PgQueuer's configurations tried once each with one worker, at each round trip:
  driver (asyncpg connection, asyncpg pool, psycopg) x batch size (10 ... 1000), then, on
  the fastest, its other documented knobs: `max_concurrent_tasks` at 4x the batch, the log
  aggregation timer off. The fastest is "PgQueuer at its best" for that round trip. With
  `--no-search`: asyncpg, batch 500 (the issue's best).
- `noop`: 20,000 no-op jobs drained by 1 and 2 workers at each round trip: the floor
  (bench/runners/floor_runner.py, asyncpg, batch 1000), PgQueuer's defaults on both drivers
  and at its best, Taskboard at its defaults (one row per `--taskboard-root`). Jobs/s,
  worker and PostgreSQL CPU per job, and two ratios per Taskboard row: over PgQueuer at its
  best, and over the faster of PgQueuer's two defaults rows.
- `io`: the same with 20,000 jobs that each await 10 ms (asyncio.sleep: the shape of an SMTP
  or HTTP call), plus procrastinate at its defaults and at concurrency 64.
- `latency`: pickup latency at half of Taskboard's capacity: one worker at 0 ms, I/O jobs
  enqueued at a steady rate (a batch every 5 ms) of half the first Taskboard row's I/O
  jobs/s with 1 worker at 0 ms (or `--latency-rate`), for 10 s; latency = the handler's
  start minus the enqueue's commit (CLOCK_MONOTONIC, shared by every process). Every
  system gets the same rate.
Runs of all rows are interleaved; every timed run first waits (up to `--quiet-wait` s) for
other processes to leave the CPU. On a shared machine, read the CPU ms/job columns: they
move much less with the neighbours' load than jobs/s.

    uv run --group bench python bench/issue25.py [--runs 2] [--rtt 0,2] [--workers 1,2]
        [--taskboard-root /work/main --taskboard-root /work/wt/perfpg] [--only noop,io,latency]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from typing import Any

import common
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
    link,
    log,
    main_for,
    median,
    percentile,
    rtt_label,
    rtts,
    running_workers,
    spread,
    wait_for_quiet,
)
from systems import (
    FLOOR_ASYNCPG,
    PGQUEUER_DEFAULTS,
    PGQUEUER_PSYCOPG_DEFAULTS,
    PROCRASTINATE_DEFAULTS,
    Flavor,
    checkout_label,
    fresh_system,
    runner_argv,
    taskboard_flavors,
)
from throughput import jobs_for, one_run

JOBS = 20_000
QUICK_JOBS = 2_000
CAP = 30.0
QUICK_CAP = 8.0
SEARCH_CAP = 10.0
IO_MS = 10.0
LATENCY_SECONDS = 10.0
TICK = 0.005
TARGET_RATIO = 1.2
TARGET_CPU_MS = 0.06
FLOOR = FLOOR_ASYNCPG.but("batch 1000", "--batch-size", "1000")
PGQ_ISSUE_BEST = PGQUEUER_DEFAULTS.but("batch 500, no concurrency cap", "--batch-size", "500")
PROCRASTINATE_64 = PROCRASTINATE_DEFAULTS.but("concurrency 64, pool 32", "--concurrency", "64",
                                              "--pool-size", "32")
DRIVERS = {"asyncpg": "PgQueuer (asyncpg)", "asyncpg-pool": "PgQueuer (asyncpg pool)",
           "psycopg": "PgQueuer (psycopg)"}


def pgq(driver: str, config: str, *args: str) -> Flavor:
    """A PgQueuer flavor on `driver` with runner `args`."""
    return Flavor("pgqueuer", DRIVERS[driver], ("--driver", driver, *args), config)


# --- the search ----------------------------------------------------------------------------


async def search_pgqueuer(server: BenchServer, net: Link, args: argparse.Namespace,
                          table: Section) -> Flavor:
    """PgQueuer's fastest configuration at this round trip (1 worker, each tried once)."""
    jobs = args.jobs
    batches = (10, 500) if args.quick else (10, 50, 100, 250, 500, 1000)
    drivers = ("asyncpg", "psycopg") if args.quick else tuple(DRIVERS)
    grid = [pgq(d, f"batch {b}, no concurrency cap", "--batch-size", str(b))
            for d in drivers for b in batches]
    tried: list[tuple[float, Flavor]] = []

    async def attempt(flavor: Flavor) -> None:
        await wait_for_quiet()
        log(f"search: {flavor.name} at {net.label}")
        try:
            r = await one_run(server, flavor, 1, jobs, net=net, cap=SEARCH_CAP)
        except Exception as exc:  # a configuration PgQueuer refuses is a row, not a crash
            table.rows.append([flavor.label, flavor.config, net.label, "failed", str(exc)[:80], ""])
            return
        log(f"  {r['rate']:,.0f} jobs/s")
        tried.append((r["rate"], flavor))
        table.rows.append([flavor.label, flavor.config, net.label, f"{r['rate']:,.0f}",
                           f"{r['worker_cpu_ms'] + r['pg_cpu_ms']:.3f}", ""])

    for flavor in grid:
        await attempt(flavor)
    if not tried:
        raise RuntimeError("no PgQueuer configuration finished a job")
    _, first = max(tried, key=lambda t: t[0])
    batch = first.runner_args[first.runner_args.index("--batch-size") + 1]
    driver = first.runner_args[1]
    if not args.quick:
        cap = str(4 * int(batch))
        for flavor in (
                pgq(driver, f"batch {batch}, max_concurrent_tasks {cap}", "--batch-size", batch,
                    "--concurrency", cap),
                pgq(driver, f"batch {batch}, no concurrency cap, log aggregation off",
                    "--batch-size", batch, "--log-aggregation", "0")):
            await attempt(flavor)
    _, best = max(tried, key=lambda t: t[0])
    for row in table.rows:
        if row[0] == best.label and row[1] == best.config and row[2] == net.label:
            row[5] = "best"
    return Flavor(best.system, best.label, best.runner_args, f"at its best: {best.config}")


# --- throughput ----------------------------------------------------------------------------


ANALYZED = "; each database ANALYZEd right after its enqueue (--analyze)"


def drain_section(title: str) -> Section:
    return Section(title, [
        "system", "configuration", "added RTT", "workers", "jobs/s", "seconds (finished)",
        "worker CPU ms/job", "PostgreSQL CPU ms/job", "machine CPU ms/job (worker + PG)",
        "the enqueue's PostgreSQL CPU ms/job (not in the above)", "÷ PgQueuer at its best", "÷ PgQueuer defaults (the faster driver)", "other load, cores"])


async def drains(server: BenchServer, args: argparse.Namespace, flavors_at: Any,
                 section: Section, *, io_ms: float) -> dict[tuple[str, float, int], dict[str, float]]:
    """Every flavor x workers x runs at every round trip; medians keyed (name, rtt, workers)."""
    out: dict[tuple[str, float, int], dict[str, float]] = {}
    for rtt in rtts(args):
        async with link(server, rtt) as net:
            flavors: list[tuple[str, Flavor]] = flavors_at(rtt)
            for workers in args.worker_counts:
                results: dict[Flavor, list[dict[str, float]]] = {}
                for run in range(args.runs):
                    for _, flavor in flavors:
                        await wait_for_quiet()
                        log(f"{'io' if io_ms else 'noop'}: {flavor.name}, {net.label}, "
                            f"{workers} worker(s), run {run + 1}/{args.runs}")
                        jobs = jobs_for(flavor, args.jobs) if not io_ms else args.jobs
                        r = await one_run(server, flavor, workers, jobs, net=net, cap=args.cap,
                                          io_ms=io_ms, analyze=args.analyze)
                        log(f"  {r['rate']:,.0f} jobs/s, {r['worker_cpu_ms'] + r['pg_cpu_ms']:.3f} "
                            "CPU ms/job")
                        results.setdefault(flavor, []).append(r)
                cell = {}
                for role, flavor in flavors:
                    rs = results[flavor]
                    cell[role] = (flavor, {
                        "rate": median([r["rate"] for r in rs]),
                        "cpu": median([r["worker_cpu_ms"] + r["pg_cpu_ms"] for r in rs]),
                        "enqueue_cpu": median([r["enqueue_pg_cpu_ms"] for r in rs])})
                    out[(flavor.name, rtt, workers)] = cell[role][1]
                best = cell.get("pgq best")
                defaults = max((cell[k] for k in ("pgq defaults", "pgq defaults psycopg")
                                if k in cell), key=lambda c: c[1]["rate"], default=None)
                for role, flavor in flavors:
                    rs = results[flavor]
                    rate = cell[role][1]["rate"]
                    ratios = ["", ""]
                    if role.startswith("taskboard"):
                        for i, peer in enumerate((best, defaults)):
                            if peer is not None:
                                driver = peer[0].label.removeprefix("PgQueuer (").rstrip(")")
                                config = peer[0].config.removeprefix("at its best: ")
                                config = config.split(" (as ")[0].removeprefix("defaults: ")
                                ratios[i] = f"{rate / peer[1]['rate']:.2f}x ({driver}, {config})"
                    capped = [r for r in rs if r["finished"] < r["jobs"]]
                    seconds = spread([r["seconds"] for r in rs], "{:.1f}")
                    if capped:
                        seconds += f" ({spread([r['finished'] for r in capped])} of {int(rs[0]['jobs']):,})"
                    section.rows.append([
                        flavor.label, flavor.config, net.label, str(workers),
                        spread([r["rate"] for r in rs]), seconds,
                        spread([r["worker_cpu_ms"] for r in rs], "{:.3f}"),
                        spread([r["pg_cpu_ms"] for r in rs], "{:.3f}"),
                        spread([r["worker_cpu_ms"] + r["pg_cpu_ms"] for r in rs], "{:.3f}"),
                        spread([r["enqueue_pg_cpu_ms"] for r in rs], "{:.3f}"),
                        *ratios, spread([r["foreign"] for r in rs], "{:.2f}")])
    return out


# --- pickup latency ------------------------------------------------------------------------


async def latency_run(server: BenchServer, flavor: Flavor, rate: float, seconds: float,
                      ms: float) -> dict[str, Any]:
    """One worker at 0 ms; keyed I/O jobs enqueued at `rate`/s for `seconds`."""
    async with fresh_system(server, flavor, "lat") as (dbname, _url, client):
        board = StartBoard()
        worker = WorkerProcess(f"{flavor.system}-lat", runner_argv(
            flavor, server.tcp_url(dbname), "w0"), board)
        async with running_workers([worker]):
            pg_before = cpu_snapshot(server.postgres_pids())
            w_before = worker.cpu_seconds()
            mark = foreign_mark()
            committed: dict[str, float] = {}
            total = max(1, int(rate * seconds))
            t0 = time.monotonic()
            sent = 0
            while sent < total:
                due = min(total, int((time.monotonic() - t0) * rate) + 1)
                if due > sent:
                    keys = [f"l{i}" for i in range(sent, due)]
                    at = await client.enqueue_keyed_io(keys, ms)
                    committed.update((k, at) for k in keys)
                    sent = due
                next_at = t0 + sent / rate
                await asyncio.sleep(max(TICK, next_at - time.monotonic()))
            enqueue_end = time.monotonic()
            with contextlib.suppress(TimeoutError):  # a job never started is counted below
                await board.wait(f"l{total - 1}", timeout=30)
            await asyncio.sleep(2 * ms / 1000 + 0.2)  # the last handlers' I/O
            w_cpu = worker.cpu_seconds() - w_before
            pg_cpu = cpu_used(pg_before, cpu_snapshot(server.postgres_pids()))
    lat = [1000 * (board.starts[k][0][0] - at) for k, at in committed.items() if k in board.starts]
    return {"offered": total / (enqueue_end - t0), "jobs": total, "started": len(lat),
            "p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat, default=0),
            "worker_cpu_ms": 1000 * w_cpu / total, "pg_cpu_ms": 1000 * pg_cpu / total,
            "foreign": foreign_cores(mark)}


async def latencies(server: BenchServer, args: argparse.Namespace, flavors: list[Flavor],
                    rate: float, how: str) -> Section:
    section = Section(
        f"Pickup latency at half of Taskboard's capacity: {rate:,.0f} jobs/s offered for "
        f"{args.latency_seconds:g} s, jobs awaiting {args.io_ms:g} ms, 1 worker, 0 ms",
        ["system", "configuration", "offered jobs/s", "started", "p50 ms", "p99 ms", "max ms",
         "worker CPU ms/job", "PostgreSQL CPU ms/job", "other load, cores"])
    results: dict[Flavor, list[dict[str, Any]]] = {}
    for run in range(args.runs):
        for flavor in flavors:
            await wait_for_quiet()
            log(f"latency: {flavor.name}, {rate:,.0f}/s, run {run + 1}/{args.runs}")
            r = await latency_run(server, flavor, rate, args.latency_seconds, args.io_ms)
            log(f"  p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, {r['started']}/{r['jobs']} started")
            results.setdefault(flavor, []).append(r)
    for flavor, rs in results.items():
        section.rows.append([
            flavor.label, flavor.config, spread([r["offered"] for r in rs]),
            spread([r["started"] for r in rs]) + f" of {rs[0]['jobs']:,}",
            spread([r["p50"] for r in rs], "{:.1f}"), spread([r["p99"] for r in rs], "{:.1f}"),
            spread([r["max"] for r in rs], "{:.1f}"),
            spread([r["worker_cpu_ms"] for r in rs], "{:.3f}"),
            spread([r["pg_cpu_ms"] for r in rs], "{:.3f}"),
            spread([r["foreign"] for r in rs], "{:.2f}")])
    section.notes += [
        f"Rate: {how}. Jobs are enqueued in a batch every {1000 * TICK:g} ms (or one at a time "
        "when slower), each batch one statement on the harness's unix socket; latency = the "
        "handler's first line minus the moment that statement's commit returned.",
        "Worker and PostgreSQL CPU per job include the idle time between jobs (polls, "
        "heartbeats): at a steady rate that is part of what a job costs.",
    ]
    return section


def summary(title: str, got: dict[tuple[str, float, int], dict[str, float]],
            columns: list[tuple[str, Any]], args: argparse.Namespace,
            best_at: dict[float, Flavor]) -> Section:
    """The issue's table: one column per system, rows per RTT and workers, jobs/s (and
    machine CPU ms/job) per cell; Taskboard cells carry both ratios."""
    section = Section(title, ["added RTT, workers", *(name for name, _ in columns)])
    for rtt in rtts(args):
        for workers in args.worker_counts:
            cells = {}
            for name, pick in columns:
                flavor = pick(rtt)
                cells[name] = got.get((flavor.name, rtt, workers)) if flavor else None
            best = got.get((best_at[rtt].name, rtt, workers))
            defaults = max((c for n, c in cells.items() if n.startswith("PgQueuer defaults")
                            and c), key=lambda c: c["rate"], default=None)
            row = [f"{rtt_label(rtt)}, {workers}"]
            for name, _ in columns:
                c = cells[name]
                if c is None:
                    row.append("—")
                    continue
                text = f"{c['rate']:,.0f} ({c['cpu']:.3f} ms)"
                if name.startswith("Taskboard"):
                    ratios = [f"{c['rate'] / peer['rate']:.2f}x {what}"
                              for peer, what in ((best, "best"), (defaults, "defaults")) if peer]
                    text += " " + ", ".join(ratios)
                row.append(text)
            section.rows.append(row)
    section.notes.append(
        "Each cell: median jobs/s (machine CPU ms/job: worker + PostgreSQL). Taskboard cells: "
        "x best = over PgQueuer at its best (the search's winner at that RTT, named in the "
        "table above), x defaults = over the faster PgQueuer defaults cell of the row.")
    return section


# --- the script ----------------------------------------------------------------------------


def targets(noop: dict[tuple[str, float, int], dict[str, float]], tbs: list[Flavor],
            best_at: dict[float, Flavor]) -> list[Target]:
    out = []
    for tb in tbs:
        for (name, rtt, workers), got in sorted(noop.items()):
            if name != tb.name or rtt not in best_at:
                continue
            peer = noop.get((best_at[rtt].name, rtt, workers))
            if peer:
                ratio = got["rate"] / peer["rate"]
                out.append(Target(
                    f"{tb.label} defaults, no-op, {workers} worker(s), {rtt_label(rtt)}",
                    f">= {TARGET_RATIO:g}x PgQueuer at its best",
                    f"{ratio:.2f}x {best_at[rtt].label} {best_at[rtt].config} "
                    f"({got['rate']:,.0f} vs {peer['rate']:,.0f} jobs/s)",
                    ratio >= TARGET_RATIO if rtt in (0.0, 2.0) else None))
        got = noop.get((tb.name, 0.0, 1))
        if got:
            out.append(Target(f"{tb.label} defaults, machine CPU per no-op job, 1 worker, 0 ms",
                              f"<= {TARGET_CPU_MS} ms (worker + PostgreSQL)",
                              f"{got['cpu']:.3f} ms (the drain; the enqueue's server CPU "
                              f"would add {got['enqueue_cpu']:.3f})", got["cpu"] <= TARGET_CPU_MS))
    return out


async def measure(server: BenchServer, args: argparse.Namespace) -> list[Section]:
    args.jobs = args.jobs or (QUICK_JOBS if args.quick else JOBS)
    args.runs = 1 if args.quick else args.runs
    args.cap = QUICK_CAP if args.quick else CAP
    common._quiet_cap = min(common._quiet_cap, args.quiet_wait)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    tbs = taskboard_flavors(args.taskboard_root)
    sections: list[Section] = []
    best_at: dict[float, Flavor] = {}
    found = Section("PgQueuer configuration search: each candidate once, 1 worker, no-op jobs",
                    ["system", "configuration", "added RTT", "jobs/s", "machine CPU ms/job",
                     "chosen"])
    for rtt in rtts(args):
        if "search" in only and not args.no_search:
            async with link(server, rtt) as net:
                best_at[rtt] = await search_pgqueuer(server, net, args, found)
        else:
            best_at[rtt] = Flavor(PGQ_ISSUE_BEST.system, PGQ_ISSUE_BEST.label,
                                  PGQ_ISSUE_BEST.runner_args,
                                  f"at its best: {PGQ_ISSUE_BEST.config} (not searched)")
    if found.rows:
        found.notes.append(
            "Grid from PgQueuer 1.6's `run()` and its benchmark docs (asyncpg or the asyncpg "
            "pool driver for throughput, batch size the main knob): driver x batch_size, "
            "then on the fastest `max_concurrent_tasks` = 4x batch and "
            "`log_aggregation_interval=0`. dequeue_timeout only matters when the queue is "
            "empty (a drain is woken by NOTIFY), so it is left at its default.")
        sections.append(found)

    def peers_at(rtt: float) -> list[tuple[str, Flavor]]:
        return [("pgq defaults", PGQUEUER_DEFAULTS),
                ("pgq defaults psycopg", PGQUEUER_PSYCOPG_DEFAULTS),
                ("pgq best", best_at[rtt])]

    def tb_rows() -> list[tuple[str, Flavor]]:
        return [(f"taskboard {i}", tb) for i, tb in enumerate(tbs)]

    noop: dict[tuple[str, float, int], dict[str, float]] = {}
    if "noop" in only:
        section = drain_section(f"No-op jobs: {args.jobs:,} per run (the floor "
                                f"{jobs_for(FLOOR, args.jobs):,}), timed to the last finished "
                                f"or {args.cap:g} s{ANALYZED if args.analyze else ''}")
        noop = await drains(server, args, lambda rtt: [("floor", FLOOR), *peers_at(rtt),
                                                       *tb_rows()], section, io_ms=0)
        section.targets = targets(noop, tbs, best_at)
        section.notes += NOTES
        sections.append(section)
        sections.append(summary("No-op jobs side by side", noop, [
            ("PgQueuer defaults (asyncpg)", lambda rtt: PGQUEUER_DEFAULTS),
            ("PgQueuer defaults (psycopg)", lambda rtt: PGQUEUER_PSYCOPG_DEFAULTS),
            ("PgQueuer at its best", lambda rtt: best_at[rtt]),
            ("the floor (asyncpg, batch 1000)", lambda rtt: FLOOR),
            *((tb.label, lambda rtt, tb=tb: tb) for tb in tbs)], args, best_at))
    io: dict[tuple[str, float, int], dict[str, float]] = {}
    if "io" in only:
        section = drain_section(f"I/O jobs: {args.jobs:,} per run, each awaiting "
                                f"{args.io_ms:g} ms, timed to the last finished or "
                                f"{args.cap:g} s{ANALYZED if args.analyze else ''}")
        procrastinate = [("procrastinate", PROCRASTINATE_DEFAULTS),
                         ("procrastinate 64", PROCRASTINATE_64)]
        io = await drains(server, args, lambda rtt: [
            *peers_at(rtt), *(procrastinate if rtt == 0 else []), *tb_rows()], section,
            io_ms=args.io_ms)
        section.notes += [*NOTES, "PgQueuer at its best here is the no-op search's winner "
                          "at the same RTT (no cap on tasks, so its batch size is the knob "
                          "that matters for waiting jobs too).",
                          "procrastinate is not searched here: its defaults "
                          "(concurrency 1) and concurrency 64 (the top of throughput.py's "
                          "grid), at 0 ms only (both run into the cap: their rate there is "
                          "what they finished)."]
        sections.append(section)
        sections.append(summary(f"I/O jobs ({args.io_ms:g} ms each) side by side", io, [
            ("PgQueuer defaults (asyncpg)", lambda rtt: PGQUEUER_DEFAULTS),
            ("PgQueuer defaults (psycopg)", lambda rtt: PGQUEUER_PSYCOPG_DEFAULTS),
            ("PgQueuer at its best", lambda rtt: best_at[rtt]),
            ("procrastinate defaults", lambda rtt: PROCRASTINATE_DEFAULTS if rtt == 0 else None),
            ("procrastinate concurrency 64", lambda rtt: PROCRASTINATE_64 if rtt == 0 else None),
            *((tb.label, lambda rtt, tb=tb: tb) for tb in tbs)], args, best_at))
    if "latency" in only:
        rate = args.latency_rate
        how = f"--latency-rate {rate:g}"
        if not rate:
            got = io.get((tbs[0].name, 0.0, 1))
            if got is None:
                raise SystemExit("latency needs --latency-rate, or the io section at 0 ms "
                                 "with 1 worker")
            rate = got["rate"] / 2
            how = (f"half of {tbs[0].label}'s I/O jobs/s with 1 worker at 0 ms in this run "
                   f"({got['rate']:,.0f})")
        sections.append(await latencies(server, args, [
            PGQUEUER_DEFAULTS, best_at.get(0.0, PGQ_ISSUE_BEST), *tbs], rate, how))
    # Each worker imports its checkout when it starts: a checkout that moved during the run
    # was measured at more than one commit.
    moved = [f"{tb.label} is now {now}" for tb in tbs if tb.root
             and (now := checkout_label(tb.root)) != tb.label.removeprefix("Taskboard [")[:-1]]
    if moved and sections:
        sections[-1].notes.append("CHECKOUT MOVED during this run (its rows mix commits): "
                                  + "; ".join(moved) + ". Pin a baseline in a checkout of "
                                  "its own (`git worktree add /tmp/base COMMIT`).")
    return sections


NOTES = [
    "Median (min-max) over runs, each on a fresh database; runs of all rows interleaved. The "
    "clock starts when the one-batch enqueue commits and stops when the database shows no "
    "unfinished job (PgQueuer's buffered acks included), or at the cap.",
    "CPU per job: user + system time of the worker processes and of every process of the "
    "bench's PostgreSQL server (psutil, from /proc), over the timed drain (from the "
    "enqueue's commit, as the clock), divided by the jobs finished. The machine's figure is "
    "their sum; the harness and the proxy are left out. The enqueue's column: the server's "
    "CPU while the harness enqueued the run's jobs in one statement, per job (in this "
    "script's runs before 2026-12-05 05:00 UTC it was inside the PostgreSQL column).",
    "÷ PgQueuer at its best: this row's jobs/s over PgQueuer's row 'at its best' in the same "
    "RTT and worker count (the search's winner at that RTT, named in the cell). ÷ PgQueuer "
    "defaults: over the faster of PgQueuer's two defaults rows (asyncpg or psycopg, named).",
    "The floor (bench/runners/floor_runner.py) is a bare leased queue: one statement per batch "
    "acks and claims, a function call per job, nothing else. Not a peer; its runs drain 5x "
    "the jobs. Taskboard rows named [folder@commit] ran that checkout's engine "
    "(--taskboard-root).",
]


def parser() -> argparse.ArgumentParser:
    p = base_parser(__doc__.splitlines()[0], runs=2, rtt=True)
    p.set_defaults(rtt="0,2")
    p.add_argument("--workers", default="1,2", help="worker counts (default 1,2)")
    p.add_argument("--jobs", type=int, default=0, help=f"jobs per run (default {JOBS:,})")
    p.add_argument("--io-ms", type=float, default=IO_MS, help="milliseconds each I/O job awaits")
    p.add_argument("--only", default="search,noop,io,latency",
                   help="sections to run (default search,noop,io,latency)")
    p.add_argument("--no-search", action="store_true",
                   help="PgQueuer's best = asyncpg, batch 500 (the issue's), not searched")
    p.add_argument("--taskboard-root", action="append", default=[], metavar="PATH",
                   help="measure Taskboard from this checkout (repeat to compare checkouts; "
                        "default: this one)")
    p.add_argument("--latency-rate", type=float, default=0.0,
                   help="jobs/s offered in the latency section (default: half of Taskboard's "
                        "measured I/O rate)")
    p.add_argument("--latency-seconds", type=float, default=LATENCY_SECONDS)
    p.add_argument("--analyze", action="store_true",
                   help="ANALYZE each run's database right after its enqueue, as autovacuum "
                        "does within a minute on a real queue (every system alike)")
    p.add_argument("--quiet-wait", type=float, default=20.0,
                   help="seconds to wait for a quiet machine before each run (default 20)")
    return p


def _parse(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    original = p.parse_args

    def parse(*a: Any, **k: Any) -> argparse.Namespace:
        args = original(*a, **k)
        try:
            args.worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
        except ValueError:
            p.error("--workers: whole numbers, comma-separated")
        if not args.worker_counts or min(args.worker_counts) < 1:
            p.error("--workers: at least one worker")
        unknown = {s.strip() for s in args.only.split(",")} - {"search", "noop", "io", "latency", ""}
        if unknown:
            p.error(f"--only: unknown section(s) {', '.join(sorted(unknown))}")
        taskboard_flavors(args.taskboard_root)  # exit 2 on a folder that is no checkout
        return args

    p.parse_args = parse  # type: ignore[method-assign]
    return p


if __name__ == "__main__":
    main_for(measure, _parse(parser()))
