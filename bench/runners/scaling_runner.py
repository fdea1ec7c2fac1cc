"""A Taskboard worker process for bench/scaling.py that also reports its renewal lateness.

The same `Worker` as taskboard_runner.py (the engine as `taskboard worker` runs it, with the
bench kinds), plus one line a second on stdout: `L <ms>,<ms>,...`, the renewal-lateness
samples (`Worker.counters.renewal_lateness`: when each renewal tick ran minus when it was
due) recorded since the last line. Reported as it goes, so a worker that is SIGKILLed
later has still told the harness about its ticks until then.
`--concurrency N` is passed to the engine only when its settings have that field (the
setting for handlers that hold no connection is being added as this is written).
SIGTERM drains, as in the CLI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys

import protocol
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from tb_kinds import bench_registry


def report(worker: Worker) -> None:
    samples = worker.counters.renewal_lateness
    taken = [samples.popleft() for _ in range(len(samples))]
    if taken:
        sys.stdout.write("L " + ",".join(f"{1000 * s:.3f}" for s in taken) + "\n")
        sys.stdout.flush()


async def reporting(worker: Worker) -> None:
    while True:
        await asyncio.sleep(1.0)
        report(worker)


async def main(args: argparse.Namespace) -> None:
    extra = {}
    if args.concurrency and "concurrency" in {f.name for f in dataclasses.fields(WorkerSettings)}:
        extra["concurrency"] = args.concurrency
    settings = WorkerSettings(lease_seconds=args.lease, pool_size=args.pool_size,
                              poll_seconds=args.poll, worker_id=args.id, **extra)
    worker = Worker(args.url, registry=bench_registry(), settings=settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, worker.drain)
    task = loop.create_task(worker.run())
    await worker.wait_started()
    reporter = loop.create_task(reporting(worker))
    protocol.ready()
    try:
        await task
    finally:
        reporter.cancel()
        report(worker)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--lease", type=float, default=60.0)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--poll", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=0,
                        help="the engine's concurrency for connection-free handlers (0: its default)")
    asyncio.run(main(parser.parse_args()))
