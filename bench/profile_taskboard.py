"""Where Taskboard's no-op throughput goes: server-side statements and worker-side CPU.

One worker process drains 20,000 no-op jobs (as in throughput.py) while
- pg_stat_statements counts every statement it sends (calls per job, server time per job
  and per call, the share of server execution time), which shows the round trips each job
  costs (the bench's server loads the extension: see common.BenchServer);
- psutil measures CPU per job in the worker and in PostgreSQL;
- py-spy, when installed, samples the worker process (CPU only, idle excluded) and the
  report lists the functions the CPU goes to, self and inclusive; without py-spy the
  worker runs under cProfile instead (slower, and it counts calls, not samples: read its
  shares, not its rate).

    uv run --group bench --with py-spy python bench/profile_taskboard.py
        [--taskboard-root PATH ...]  (each checkout in turn: a before/after in one report)

Writes the collapsed py-spy stacks (or the cProfile stats) to bench/.data/profile/.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import pstats
import shutil
import time
from typing import Any

from common import (
    DATA_DIR,
    BenchServer,
    Section,
    StartBoard,
    WorkerProcess,
    base_parser,
    cpu_snapshot,
    cpu_used,
    is_harness_query,
    log,
    main_for,
    running_workers,
)
from systems import Flavor, fresh_system, runner_argv, taskboard_flavors
from throughput import _wait_drained

JOBS = 20_000
QUICK_JOBS = 3_000
MARK = "bench:remaining"
PROFILE_DIR = DATA_DIR / "profile"


async def _pyspy(pid: int, seconds: float, out: str) -> asyncio.subprocess.Process | None:
    exe = shutil.which("py-spy")
    if exe is None:
        return None
    return await asyncio.create_subprocess_exec(
        # --nonblocking: the default pauses the worker for every sample, which slowed it
        # from ~1,250 to ~540 jobs/s in the first full run.
        exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--nonblocking",
        "--duration", str(max(1, int(seconds))), "--output", out,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)


def _frames(path: str) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """Self and inclusive sample counts per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count_text = line.rstrip().rpartition(" ")
            if not stack:
                continue
            count = int(count_text)
            total += count
            frames = [_short(fr) for fr in stack.split(";")]
            own[frames[-1]] += count
            for fr in set(frames):
                incl[fr] += count
    return own, incl, total


def _short(frame: str) -> str:
    # "function (path/to/module.py:123)" -> "function (module.py)": lines split one
    # function into many rows.
    name, _, where = frame.partition(" (")
    module = where.rsplit("/", 1)[-1].split(":", 1)[0].rstrip(")")
    return f"{name} ({module})"


async def measure(server: BenchServer, args: argparse.Namespace) -> list[Section]:
    sections: list[Section] = []
    for flavor in taskboard_flavors(getattr(args, "taskboard_root", [])):
        if getattr(args, "cli", False):  # `taskboard worker` itself, its log included
            flavor = Flavor("taskboard_cli", flavor.label + " CLI", (), flavor.config, flavor.root)
        sections += await profile(server, flavor, args)
    return sections


async def profile(server: BenchServer, flavor: Flavor, args: argparse.Namespace) -> list[Section]:
    jobs = QUICK_JOBS if args.quick else JOBS
    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    tag = flavor.label.removeprefix("Taskboard").strip(" []").replace("@", "-") or "this"
    stacks = str(PROFILE_DIR / f"taskboard_worker_{tag}.txt")
    use_pyspy = shutil.which("py-spy") is not None and not getattr(args, "cprofile", False)
    cprofile_out = str(PROFILE_DIR / f"taskboard_worker_{tag}.pstats")
    async with fresh_system(server, flavor, "prof") as (dbname, url, client):
        client.remaining_sql = f"/* {MARK} */ " + client.remaining_sql
        argv = runner_argv(flavor, url, "w0")
        if not use_pyspy:
            argv = ["-m", "cProfile", "-o", cprofile_out, *argv]
        procs = [WorkerProcess("taskboard-profile", argv, StartBoard())]
        async with running_workers(procs):
            worker = procs[0]
            pg_before = cpu_snapshot(server.postgres_pids())
            server.reset_statements()
            # Expected duration from a typical rate, so py-spy stops about when the work does.
            spy = await _pyspy(worker.pid, jobs / 1000, stacks) if use_pyspy else None
            log(f"profile {flavor.name}: draining {jobs:,} jobs"
                + (" under py-spy" if spy else " under cProfile (no py-spy)"))
            await client.enqueue_noops(jobs)
            # The drain's CPU from here, as the clock; the enqueue's server CPU on its own.
            pg_start = cpu_snapshot(server.postgres_pids())
            w_start = worker.cpu_seconds()
            t0 = time.monotonic()

            t1 = await _wait_drained(client, jobs)
            w_cpu = worker.cpu_seconds() - w_start
            pg_cpu = cpu_used(pg_start, cpu_snapshot(server.postgres_pids()))
            enqueue_pg_cpu = cpu_used(pg_before, pg_start)
            statements = [s for s in server.statements(dbname)
                          if not is_harness_query(s.query, client.remaining_sql)]
            # The harness's one enqueue statement ran after the reset too; the worker
            # inserts no jobs while it drains no-ops.
            enqueue = [s for s in statements if s.calls == 1 and "INSERT INTO taskboard_jobs" in s.query]
            statements = [s for s in statements if s not in enqueue]
            if spy is not None:
                await spy.wait()
        # The worker has drained and exited here: cProfile has written its stats.
    elapsed = t1 - t0
    calls = sum(s.calls for s in statements)
    exec_ms = sum(s.total_ms for s in statements)
    who = f"{flavor.label}, {flavor.config}"
    summary = Section(
        f"Taskboard profile ({who}): one worker, {jobs:,} no-op jobs, {jobs / elapsed:,.0f} jobs/s"
        + ("" if use_pyspy else " under cProfile"),
        ["per job", "value"],
        [
            ["wall time (1 / rate)", f"{1000 * elapsed / jobs:.3f} ms"],
            ["statements (round trips, BEGIN/COMMIT included)", f"{calls / jobs:.2f}"],
            ["server execution time (pg_stat_statements)", f"{exec_ms / jobs:.3f} ms"],
            ["PostgreSQL CPU (every server process, psutil; the drain)",
             f"{1000 * pg_cpu / jobs:.3f} ms"],
            ["worker process CPU (psutil)", f"{1000 * w_cpu / jobs:.3f} ms"],
            ["CPU per job, both, on 2 cores", f"{1000 * (w_cpu + pg_cpu) / jobs:.3f} ms"],
            ["PostgreSQL CPU of the harness's enqueue (not in the above)",
             f"{1000 * enqueue_pg_cpu / jobs:.3f} ms"],
        ])
    stmt = Section(f"Statements the worker sent ({who}; pg_stat_statements, per job)",
                   ["statement", "calls", "calls/job", "ms/job", "rows/call", "ms/call",
                    "share of exec time"])
    for s in statements:
        if s.calls / jobs < 0.0005 and len(stmt.rows) >= 12:
            continue
        stmt.rows.append([f"`{s.query[:110]}`", f"{s.calls:,}", f"{s.calls / jobs:.3f}",
                          f"{s.total_ms / jobs:.4f}",
                          f"{s.rows / s.calls:.1f}" if s.calls else "-",
                          f"{s.total_ms / s.calls:.3f}" if s.calls else "-",
                          f"{100 * s.total_ms / exec_ms:.0f}%" if exec_ms else "-"])
    stmt.notes.append("ms/job: the statement's total execution time (pg_stat_statements "
                      "total_exec_time, planning excluded) over the jobs drained; statements "
                      "under 0.0005 calls/job are left out after the first 12. The harness's "
                      "enqueue of the batch is not counted"
                      + (f" ({enqueue[0].total_ms:.1f} ms)." if enqueue else "."))
    sections = [summary, stmt]
    if spy is not None:
        sections += _pyspy_sections(stacks, who)
    elif not use_pyspy:
        sections.append(_cprofile_section(cprofile_out, who))
    return sections


def _pyspy_sections(stacks: str, who: str) -> list[Section]:
    own, incl, total = _frames(stacks)
    cpu = Section(f"Worker CPU by function ({who}; py-spy, {total:,} samples at 200 Hz, "
                  "idle excluded)", ["function", "self %", "inclusive %"])
    shown = [f for f, _ in own.most_common(15)]
    for f in shown:
        cpu.rows.append([f"`{f}`", f"{100 * own[f] / total:.1f}", f"{100 * incl[f] / total:.1f}"])
    cpu.notes.append(f"Collapsed stacks: {stacks} (feed to flamegraph.pl or speedscope).")
    wanted = ("_claim_loop", "_run_job", "_execute", "complete_many", "claim", "_renew",
              "_control_loop", "_heartbeat", "execute (cursor_async.py)", "emit",
              "_start_job", "connection (", "getconn", "putconn", "notifies", "fetchall")
    inc = Section(f"Worker CPU inclusive in selected engine functions ({who}; py-spy)",
                  ["function", "inclusive %"])
    for f, n in incl.most_common():
        if any(w in f for w in wanted):
            inc.rows.append([f"`{f}`", f"{100 * n / total:.1f}"])
        if len(inc.rows) >= 20:
            break
    return [cpu, inc]


def _cprofile_section(path: str, who: str) -> Section:
    """The worker's top functions by own time from cProfile's stats (the whole process life)."""
    stats = pstats.Stats(path)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in raw.values()) or 1.0
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:20]
    section = Section(f"Worker CPU by function ({who}; cProfile, whole process, own time)",
                      ["function", "calls", "own %", "cumulative %"])
    for (filename, line, name), (_, ncalls, tt, ct, _) in rows:
        module = filename.rsplit("/", 1)[-1]
        section.rows.append([f"`{name} ({module}:{line})`", f"{ncalls:,}",
                             f"{100 * tt / total:.1f}", f"{100 * ct / total:.1f}"])
    section.notes.append(f"Stats: {path} (python -m pstats). cProfile slows the worker and "
                         "counts start-up and idle loops too; py-spy's table is the better one.")
    return section


def parser() -> argparse.ArgumentParser:
    p = base_parser(__doc__.splitlines()[0], runs=1)
    p.add_argument("--taskboard-root", action="append", default=[], metavar="PATH",
                   help="profile Taskboard from this checkout (repeat: each in turn)")
    p.add_argument("--cli", action="store_true",
                   help="profile `taskboard worker` (runners/taskboard_cli_runner.py), not the "
                        "engine alone")
    p.add_argument("--cprofile", action="store_true",
                   help="use cProfile even when py-spy is installed")
    return p


if __name__ == "__main__":
    main_for(measure, parser())
