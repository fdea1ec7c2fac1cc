"""Run every benchmark on one server and write bench/results.md (also printed).

    uv run --group bench --with py-spy python bench/run_all.py   # full run (~3 h on 2 cores)
    uv run --group bench python bench/run_all.py --quick    # smoke test
    uv run --group bench python bench/run_all.py --only throughput,latency --rtt 0,2
    uv run --group bench python bench/run_all.py --busy 2   # the same on a busy host
    uv run --group bench python bench/run_all.py --only big_table --output bench/results-big-table.md

The targets from the benchmark issue are checked against this run's numbers and listed
first, as ratios where a ratio is the point. `--rtt` applies to throughput, latency,
recovery and scaling; the network check (what the proxy really adds) is printed first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import big_table
import ceiling
import enqueue
import explain_taskboard
import latency
import profile_taskboard
import recovery
import renewal
import rss
import scaling
import throughput
from common import (
    ALL_SYSTEMS,
    BENCH_DIR,
    BenchServer,
    Section,
    Target,
    base_parser,
    busy_host,
    environment_markdown,
    foreign_mark,
    foreign_note,
    load_note,
    loadavg,
    log,
    network_check,
    quick_waits,
    rtts,
    targets_markdown,
    watching_foreign_load,
)

BENCHMARKS = {
    "ceiling": ceiling.measure,
    "enqueue": enqueue.measure,
    "throughput": throughput.measure,
    "latency": latency.measure,
    "recovery": recovery.measure,
    "renewal": renewal.measure,
    # 1, 2, 4, 8 worker processes: rate, renewal lateness, reclaim lag, connections.
    "scaling": scaling.measure,
    "rss": rss.measure,
    # Where Taskboard's time goes; with `--with py-spy` it adds the worker's CPU by function.
    "profile": profile_taskboard.measure,
    # Inside PostgreSQL: the engine's claim and grouped completion vs a bare SKIP LOCKED pair.
    "explain": explain_taskboard.measure,
    # A million finished rows, before and after pruning (~20 min): only with --only big_table.
    "big_table": big_table.measure,
}
# Steps run only when named in --only.
ON_REQUEST = {"big_table"}
# Steps measured at each --rtt.
RTT_STEPS = {"throughput", "latency", "recovery", "scaling"}

REFERENCE = """\
Reference from an earlier measurement (2 cores, embedded PostgreSQL 18, fsync on): procrastinate
3.10 ~460 and PgQueuer 1.6 ~1,000-1,500 no-op jobs/s at 8 in flight; batched claim+ack SQL
~45,000 rows/s; after a SIGKILL ~1 s into a job PgQueuer re-ran it 32.7 s later with defaults and
1.7-4.6 s later with 1 s heartbeats and a 2 s timeout; procrastinate never re-ran it by default,
and 3.6 s later with a user-written periodic task and a 2 s threshold.
"""


async def run_all(server: BenchServer, args: argparse.Namespace) -> list[Section]:
    """Every selected benchmark in order; a failing one is reported, the rest still run."""
    wanted = ([n.strip() for n in args.only.split(",")] if args.only
              else [n for n in BENCHMARKS if n not in ON_REQUEST])
    sections: list[Section] = []
    if set(wanted) & RTT_STEPS:
        log("=== network check ===")
        sections.append(await network_check(server, rtts(args)))
    for name in wanted:
        started = time.monotonic()
        mark = foreign_mark()
        at_start = loadavg()
        log(f"=== {name} ===")
        try:
            result = await BENCHMARKS[name](server, args)
        except Exception as exc:  # one broken benchmark must not lose the others' numbers
            log(f"{name} failed: {exc!r}")
            failed = Section(f"{name}: FAILED", ["error"], [[f"`{type(exc).__name__}: {exc}`"]])
            sections.append(failed)
            continue
        result = result if isinstance(result, list) else [result]
        for section in result:
            section.notes.append(foreign_note(mark))
            section.notes.append(load_note(at_start))
        sections += result
        log(f"=== {name} done in {time.monotonic() - started:.0f}s ===")
    return sections


def big_table_reference(path: Path = BENCH_DIR / "results-big-table.md") -> list[Target]:
    """The 1M-finished-rows targets from bench/big_table.py's last report (a separate run)."""
    try:
        text = path.read_text()
    except OSError:
        text = ""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and "no-op throughput" in cells[0] and "/ (a)" in cells[0]:
            out.append(Target(f"1M finished rows: {cells[0]} (from {path.name}, a separate run)",
                              cells[1], cells[2], {"met": True, "MISSED": False}.get(cells[3])))
    if not out:
        out.append(Target("1M finished rows: no-op rate within 10% of the empty table",
                          "within 10%", f"not in this run: see `bench/big_table.py` ({path.name})",
                          None))
    return out


def ordered_targets(sections: list[Section], ran: list[str]) -> list[Target]:
    """The issue's targets first, in its order; then the rest of this run's."""
    targets = [t for s in sections for t in s.targets]
    order: list[Callable[[Target], bool]] = [
        lambda t: t.name.startswith("no-op processing") and "x the faster peer" in t.goal,
        lambda t: t.name.startswith("no-op processing") and "jobs/s" in t.goal,
        lambda t: t.name.startswith("enqueue"),
        lambda t: " workers, " in t.name and t.name[:1].isdigit(),  # scaling.py
    ]
    first: list[Target] = []
    for wanted in order:
        first += [t for t in targets if wanted(t) and t not in first]
    if "big_table" not in ran:
        first += big_table_reference()
    return first + [t for t in targets if t not in first]


def ceiling_context(sections: list[Section]) -> list[str]:
    """What the throughput targets (throughput.TARGET_RATIO) ask for beside what this machine does in the same run: the
    floor (a Python worker with nothing in it) and pgbench's bare claim+ack with as many
    connections as the workers use, then the CPU each job may cost at the ask, so a reader
    can tell a missed target from an impossible one."""
    rates = next((s.data["rates"] for s in sections if "rates" in s.data), None)
    roles = next((s.data["roles"] for s in sections if "roles" in s.data), {})
    cpu = next((s.data["cpu"] for s in sections if "cpu" in s.data), {})
    if not rates:
        return []
    ceilings = {clients: next((s.data[f"claim_ack_{clients}"] for s in sections
                               if f"claim_ack_{clients}" in s.data), {})
                for clients in (1, 2)}
    eight = next((s.data["claim_ack"] for s in sections if "claim_ack" in s.data), {})
    cores = os.cpu_count() or 1
    rows, budget_rows = [], []
    for rtt, workers in sorted({(r, w) for (n, r, w) in rates if n.startswith("Taskboard")}):
        fastest = throughput.fastest_peer(rates, rtt, workers)
        if fastest is None:
            continue
        asked = throughput.TARGET_RATIO * fastest[1]
        flavor = roles.get(("Taskboard", rtt), {}).get("defaults")
        defaults = (flavor.name, rtt, workers) if flavor else None
        floors = [k for k in rates if k[1:] == (rtt, workers) and k[0].startswith("Floor")]
        floor = max(floors, key=lambda k: rates[k]) if floors else None
        pgbench = ceilings.get(workers, {})

        cells = [_against(asked, rates.get(k) if k else None) for k in (defaults, floor)]
        cells += [_against(asked, pgbench.get(batch)) for batch in (100, 1000)]
        rows.append(f"| {rtt:g} ms, {workers} | {fastest[1]:,.0f} | **{asked:,.0f}** | "
                    + " | ".join(cells) + " |")
        peer = (fastest[0], rtt, workers)
        budget_rows.append(f"| {rtt:g} ms, {workers} | **{1000 * cores / asked:.4f}** | "
                           + " | ".join(_cpu_cell(cpu.get(k) if k else None, cores)
                                        for k in (defaults, peer, floor)) + " |")
    if not rows:
        return []
    lines = [
        f"What the {throughput.TARGET_RATIO:g}x targets ask, beside what this machine did in "
        "this run (rows/s or jobs/s; `ask Nx`: the ask divided by that figure, above 1 means "
        "short of the ask). The floor is bench/runners/floor_runner.py at its best batch; "
        "pgbench is a C client on a bare two-column queue table (no worker code, fencing, "
        "history or counts) with as many connections as the workers use for claims and "
        "completions, at 0 ms (unix socket), so it bounds the 2 ms rows from above too; "
        "see 'Machine ceiling' below. A pgbench figure that ran the table dry is a lower "
        "bound.",
        "",
        f"| RTT, workers | faster peer at its best | {throughput.TARGET_RATIO:g}x ask | "
        "Taskboard defaults | floor best | pgbench claim+ack, batches of 100 | pgbench "
        "claim+ack, batches of 1000 |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if eight:
        lines += ["pgbench with 8 clients: " + ", ".join(
            f"batches of {batch}: {rows_s:,.0f} rows/s" for batch, rows_s in eight.items()) + ".",
                  ""]
    lines += [
        f"The same asks as CPU: the workers and PostgreSQL share this machine's {cores} cores, "
        f"so at the ask each job may cost at most {cores} core-seconds / ask, worker and server "
        "together, even with every core busy and nothing waiting. Beside it, what each "
        "system's jobs cost in this run (median worker + PostgreSQL CPU ms per job from the "
        "no-op table; the proxy's CPU left out) and the rate that cost would allow with "
        "every core busy on it (`N cores: R/s`).",
        "",
        "| RTT, workers | CPU ms/job the ask allows | Taskboard defaults | faster peer at its "
        "best | floor best |",
        "|---|---|---|---|---|",
        *budget_rows,
        "",
    ]
    return lines


def _against(asked: float, rate: float | None) -> str:
    return f"{rate:,.0f} (ask {asked / rate:.2f}x)" if rate else "—"


def _cpu_cell(ms_per_job: float | None, cores: int) -> str:
    if not ms_per_job:
        return "—"
    return f"{ms_per_job:.4f} ({cores} cores: {1000 * cores / ms_per_job:,.0f}/s)"


def render(server: BenchServer, sections: list[Section], args: argparse.Namespace, seconds: float) -> str:
    """The whole report as markdown."""
    ran = ([n.strip() for n in args.only.split(",")] if args.only
           else [n for n in BENCHMARKS if n not in ON_REQUEST])
    targets = ordered_targets(sections, ran)
    command = "--quick" if args.quick else f"--runs {args.runs}"
    if args.only:
        command += f" --only {args.only}"
    if set(ran) & RTT_STEPS:
        command += f" --rtt {args.rtt}"
    if args.busy:
        command += f" --busy {args.busy}"
    if args.systems != ALL_SYSTEMS:
        command += f" --systems {args.systems}"
    if args.floor:
        command += " --floor"
    out = [
        "# Taskboard benchmarks",
        "",
        f"Generated by `uv run --group bench python bench/run_all.py {command}` "
        f"on {time.strftime('%Y-%m-%d %H:%M %Z')} in {seconds / 60:.0f} min. "
        "Numbers are median (min-max) over runs unless a column says otherwise."
        + (" --quick: smoke-test sizes, NOT representative." if args.quick else ""),
        "",
        environment_markdown(server),
        "## Targets",
        "",
        targets_markdown(targets) if targets else "(none measured)",
        "",
        *ceiling_context(sections),
        "## Results",
        "",
    ]
    out += [s.markdown() for s in sections]
    out += ["## Reference", "", REFERENCE]
    return "\n".join(out)


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], rtt=True)
    parser.add_argument("--only", default="", help="comma-separated subset of " + ",".join(BENCHMARKS))
    throughput.add_floor_option(parser)
    parser.add_argument("--output", type=Path, default=BENCH_DIR / "results.md",
                        help="markdown file to write (default bench/results.md)")
    args = parser.parse_args()
    quick_waits(args)
    server = BenchServer()
    server.start()
    started = time.monotonic()
    try:
        with watching_foreign_load(), busy_host(args.busy):
            at_start = loadavg()
            sections = asyncio.run(run_all(server, args))
            report = render(server, sections, args, time.monotonic() - started)
            report = report.replace("## Targets", f"Load average (1/5/15 min) at the start of the "
                                    f"report: {at_start}; at its end: {loadavg()}.\n\n## Targets", 1)
    finally:
        server.stop()
    args.output.write_text(report)
    print(report)
    log(f"wrote {args.output}")


if __name__ == "__main__":
    main()
