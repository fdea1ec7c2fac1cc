"""Pickup latency when idle: from the enqueue call to the handler's first line.

One worker process with default settings waits on an empty queue; the harness enqueues one
probe job, waits until its handler reports, pauses a random 20-80 ms (so samples do not
fall into step with any poll timer) and repeats. With LISTEN/NOTIFY working, latency is a
few milliseconds; a worker that only polls shows about half its poll interval on average
and the whole interval at p99. Measured at each added round trip between the worker and
PostgreSQL (the harness enqueues over the unix socket: the producer is "near" the database).

    uv run --group bench python bench/latency.py --runs 3 [--rtt 0,0.5,2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from common import (
    BenchServer,
    Link,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    link,
    log,
    main_for,
    median,
    percentile,
    rtts,
    running_workers,
    selected,
    spread,
    wait_for_quiet,
)
from systems import AT_DEFAULTS, TASKBOARD, fresh_system, runner_argv

SAMPLES = 200
QUICK_SAMPLES = 30
TIMEOUT = 40.0  # longer than any peer's default poll interval (PgQueuer: 30 s)


async def one_run(server: BenchServer, system: str, samples: int, rng: random.Random,
                  net: Link) -> list[float]:
    """Latencies in seconds of `samples` probes against one idle worker."""
    flavor = AT_DEFAULTS[system]
    async with fresh_system(server, flavor, "lat") as (dbname, _, client):
        board = StartBoard()
        procs = [WorkerProcess(f"{system}-lat", runner_argv(flavor, net.url(dbname), "w0"), board)]
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
                      ["system", "configuration", "added RTT", "p50 ms", "p99 ms", "max ms",
                       "LISTEN/NOTIFY"])
    p50s_by: dict[tuple[str, float], list[float]] = {}
    for rtt in rtts(args):
        async with link(server, rtt) as net:
            for system in selected(args):
                flavor = AT_DEFAULTS[system]
                p50s, p99s, maxes = [], [], []
                for run in range(runs):
                    await wait_for_quiet()
                    log(f"latency: {flavor.label}, {net.label}, run {run + 1}/{runs}")
                    lat = await one_run(server, system, samples, rng, net)
                    p50s.append(1000 * percentile(lat, 50))
                    p99s.append(1000 * percentile(lat, 99))
                    maxes.append(1000 * max(lat))
                    log(f"  p50 {p50s[-1]:.1f} ms, p99 {p99s[-1]:.1f} ms")
                p50s_by[(system, rtt)] = p50s
                # Wake-up by notification shows as a p99 far below any poll interval (>= 1 s).
                notify = "works" if median(p99s) < 500 else "not effective (polling)"
                section.rows.append([flavor.label, flavor.config, net.label, spread(p50s, "{:.1f}"),
                                     spread(p99s, "{:.1f}"), spread(maxes, "{:.1f}"), notify])
    section.notes.append(
        "Each system with no options (its defaults), one worker, empty queue. Time runs from "
        "just before the enqueue call (so it includes the enqueue's own commit, over the unix "
        "socket) to the handler's report; both clocks are CLOCK_MONOTONIC on one machine. The "
        "worker reaches PostgreSQL over TCP, through the latency proxy when RTT is added: a "
        "pickup costs at least the notification's one-way trip plus one claim round trip.")
    for (system, rtt), p50s in p50s_by.items():
        if system == "taskboard":
            p50 = median(p50s)
            section.targets.append(Target(f"{TASKBOARD.label} idle pickup p50, {rtt:g} ms added RTT",
                                          "< 20 ms", f"{p50:.1f} ms", p50 < 20))
    section.data["p50"] = {k: median(v) for k, v in p50s_by.items()}
    return section


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0], rtt=True))
