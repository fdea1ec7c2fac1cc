"""What `taskboard worker` costs beyond the engine: worker CPU per no-op job, the CLI against
the engine alone, from each checkout named (a before/after in one run).

The other benchmarks start the engine alone (bench/runners/taskboard_runner.py): no log
line per event, no stand-ins. A user runs the command, which logs to stderr; this script
starts it as a process through its own entry point (bench/runners/taskboard_cli_runner.py,
stderr to bench/.data/logs/, a file as under a supervisor) beside the engine alone, one
worker each, 20,000 no-op jobs per run, at their defaults. Runs are interleaved (run 1 of
every row, then run 2...). The rate, the worker's CPU per job and PostgreSQL's come from
bench/throughput.py's `one_run`; the log's lines and bytes per job are read from the
worker's log file after each run.

    uv run --group bench python bench/cli_worker_cost.py --runs 3 \
        [--taskboard-root /tmp/b50f934 --taskboard-root .] [--cli-args="" --cli-args=--log-every-job]
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from typing import Any

from common import (
    LOG_DIR,
    BenchServer,
    Section,
    base_parser,
    link,
    log,
    main_for,
    median,
    spread,
    wait_for_quiet,
)
from systems import Flavor, checkout_label, taskboard_at
from throughput import JOBS, QUICK_JOBS, one_run


@dataclass(frozen=True)
class Row:
    """One line of the table: a checkout, and the engine alone or the command."""

    tree: str
    what: str
    flavor: Flavor

    @property
    def log_name(self) -> str:
        """The worker's log file as throughput.one_run names it (one worker)."""
        return f"{self.flavor.system}-tp1-w0.log"


def rows(args: argparse.Namespace) -> list[Row]:
    """Per checkout: the engine alone, then `taskboard worker` once per `--cli-args` (at its
    defaults when none is given)."""
    out = []
    for root in args.taskboard_root or [""]:
        base = taskboard_at(root) if root else None
        tree = checkout_label(root or ".")
        where = base.root if base else ""
        out.append(Row(tree, "engine alone (bench runner)",
                       Flavor("taskboard", "engine alone", (), "", where)))
        for text in args.cli_args or [""]:
            cli_args = tuple(shlex.split(text))
            config = " ".join(cli_args) or "defaults"
            out.append(Row(tree, f"`taskboard worker` ({config})",
                           Flavor("taskboard_cli", "taskboard worker", cli_args, config, where)))
    return out


def _log_size(row: Row) -> tuple[int, int]:
    """(lines, bytes) of the worker's log file from the last run."""
    path = LOG_DIR / row.log_name
    if not path.exists():
        return 0, 0
    data = path.read_bytes()
    return data.count(b"\n"), len(data)


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """Every row x runs, interleaved, one worker at 0 ms added round trip."""
    jobs = args.jobs or (QUICK_JOBS if args.quick else JOBS)
    runs = 1 if args.quick else args.runs
    lineup = rows(args)
    results: dict[Row, list[dict[str, Any]]] = {row: [] for row in lineup}
    async with link(server, 0.0) as net:
        for run in range(runs):
            for row in lineup:
                await wait_for_quiet(args.quiet_wait)
                log(f"{row.tree}: {row.what}, run {run + 1}/{runs}")
                r = await one_run(server, row.flavor, 1, jobs, net=net, cap=jobs / 200 + 60)
                r["log_lines"], r["log_bytes"] = _log_size(row)
                log(f"  {r['rate']:,.0f} jobs/s, worker {r['worker_cpu_ms']:.3f} ms/job, "
                    f"log {r['log_lines'] / r['finished']:.2f} lines/job")
                results[row].append(r)
    section = Section(
        f"Worker CPU per no-op job: `taskboard worker` against the engine alone ({jobs:,} "
        f"jobs per run, 1 worker, TCP loopback)",
        ["checkout", "worker", "jobs/s", "worker CPU ms/job", "x engine alone",
         "PostgreSQL CPU ms/job", "log lines/job", "log bytes/job", "other load, cores"],
    )
    engine_cpu: dict[str, float] = {}
    for row, rs in results.items():
        cpu = median([r["worker_cpu_ms"] for r in rs])
        if row.flavor.system == "taskboard":
            engine_cpu[row.tree] = cpu
        ratio = cpu / engine_cpu[row.tree] if engine_cpu.get(row.tree) else float("nan")
        section.rows.append([
            row.tree, row.what,
            spread([r["rate"] for r in rs]),
            spread([r["worker_cpu_ms"] for r in rs], "{:.3f}"),
            f"{ratio:.2f}x",
            spread([r["pg_cpu_ms"] for r in rs], "{:.3f}"),
            f"{median([r['log_lines'] / r['finished'] for r in rs]):.2f}",
            f"{median([r['log_bytes'] / r['finished'] for r in rs]):.0f}",
            f"{median([r['foreign'] for r in rs]):.2f}",
        ])
    section.notes += [
        "Median (min-max) over runs, each on a fresh database; runs interleaved. Worker CPU "
        "is the worker process's user+system time from the enqueue's commit to the last job finished "
        "(start-up excluded); 'x engine alone' divides by the same checkout's engine row.",
        "The command's log goes to a file (stderr redirected, as under a supervisor); its "
        "lines include the few start and stop lines. The engine alone logs nothing per job.",
        "Rows named [folder@commit] ran that checkout's code (--taskboard-root) with this "
        "checkout's runner scripts.",
    ]
    return section


def parser() -> argparse.ArgumentParser:
    p = base_parser(__doc__.splitlines()[0], runs=2)
    p.add_argument("--jobs", type=int, default=0, help=f"jobs per run (default {JOBS:,})")
    p.add_argument("--taskboard-root", action="append", default=[], metavar="PATH",
                   help="a checkout to measure (repeat for a before/after; default: this one)")
    p.add_argument("--cli-args", action="append", default=[],
                   help="flags for `taskboard worker`, one row each (repeatable; e.g. "
                        "\"--log-every-job\"; default: one row at its defaults; \"\" for that "
                        "row beside others)")
    p.add_argument("--quiet-wait", type=float, default=20.0,
                   help="seconds to wait for a quiet machine before each run (default 20)")
    return p


if __name__ == "__main__":
    main_for(measure, parser())
