"""Pickup latency when idle: from the enqueue call to the handler's first line.

One worker process with default settings waits on an empty queue; the harness enqueues one
probe job, waits until its handler reports, pauses a random 20-80 ms (so samples do not
fall into step with any poll timer) and repeats. With LISTEN/NOTIFY working, latency is a
few milliseconds; a worker that only polls shows about half its poll interval on average
and the whole interval at p99.

    uv run --group bench python bench/latency.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from common import (
    BenchServer,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    log,
    main_for,
    median,
    percentile,
    running_workers,
    selected,
    spread,
    wait_for_quiet,
)
from systems import DEFAULT_FLAVORS, TASKBOARD, fresh_system, runner_argv

SAMPLES = 200
QUICK_SAMPLES = 30
TIMEOUT = 40.0  # longer than any peer's default poll interval (PgQueuer: 30 s)


async def one_run(server: BenchServer, system: str, samples: int, rng: random.Random) -> list[float]:
    """Latencies in seconds of `samples` probes against one idle worker."""
    flavor = DEFAULT_FLAVORS[system]
    async with fresh_system(server, flavor, "lat") as (_, url, client):
        board = StartBoard()
        procs = [WorkerProcess(f"{system}-lat", runner_argv(flavor, url, "w0"), board)]
        out = []
        async with running_workers(procs):
            for i in range(samples):
                key = f"p{i}"
                t0 = time.monotonic()
                await client.enqueue_probe(key)
                [(started, _)] = await board.wait(key, timeout=TIMEOUT)
                out.append(started - t0)
                await asyncio.sleep(rng.uniform(0.02, 0.08))
        return out


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """p50/p99 per run, reported as median (min-max) over runs."""
    samples = QUICK_SAMPLES if args.quick else SAMPLES
    runs = 1 if args.quick else args.runs
    rng = random.Random(20261202)
    section = Section(f"Idle pickup latency, enqueue -> handler start ({samples} samples per run)",
                      ["system", "p50 ms", "p99 ms", "max ms", "LISTEN/NOTIFY"])
    p50s_by_system: dict[str, list[float]] = {}
    for system in selected(args):
        p50s, p99s, maxes = [], [], []
        for run in range(runs):
            await wait_for_quiet()
            log(f"latency: {DEFAULT_FLAVORS[system].label}, run {run + 1}/{runs}")
            lat = await one_run(server, system, samples, rng)
            p50s.append(1000 * percentile(lat, 50))
            p99s.append(1000 * percentile(lat, 99))
            maxes.append(1000 * max(lat))
            log(f"  p50 {p50s[-1]:.1f} ms, p99 {p99s[-1]:.1f} ms")
        p50s_by_system[system] = p50s
        # Wake-up by notification shows as a p99 far below any poll interval (>= 1 s).
        notify = "works" if median(p99s) < 500 else "not effective (polling)"
        section.rows.append([DEFAULT_FLAVORS[system].label, spread(p50s, "{:.1f}"),
                             spread(p99s, "{:.1f}"), spread(maxes, "{:.1f}"), notify])
    section.notes.append(
        "Default settings, one worker, empty queue. Time runs from just before the enqueue call "
        "(so it includes the enqueue's own commit) to the handler's report; both clocks are "
        "CLOCK_MONOTONIC on one machine.")
    if "taskboard" in p50s_by_system:
        p50 = median(p50s_by_system["taskboard"])
        section.targets.append(Target(f"{TASKBOARD.label} idle pickup p50", "< 20 ms",
                                      f"{p50:.1f} ms", p50 < 20))
    section.data["p50"] = {k: median(v) for k, v in p50s_by_system.items()}
    return section


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0]))
