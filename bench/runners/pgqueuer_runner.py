"""One PgQueuer worker process for the benchmarks.

Entrypoints: `noop`, `io` (payload = milliseconds to await), `probe` (payload = key; reports
its start), `hold` (payload =
`key:seconds`; reports, then sleeps). Runs on uvloop as `pgq run` does, over asyncpg by
default (PgQueuer's fastest documented driver), an asyncpg pool (`--driver asyncpg-pool`)
or psycopg (`--driver psycopg`).
With no options it runs as `pgq run` does: batch 10, no concurrency cap. Eight jobs in
flight is `--concurrency 8 --batch-size 4` (PgQueuer requires
`batch_size <= max_concurrent_tasks / 2`).
SIGTERM sets PgQueuer's shutdown event, which drains.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta

import protocol
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.models import Job


async def connect(url: str, driver: str) -> PgQueuer:
    """A PgQueuer over one connection of the chosen driver."""
    if driver == "asyncpg":
        import asyncpg

        return PgQueuer.from_asyncpg_connection(await asyncpg.connect(url))
    if driver == "asyncpg-pool":
        # The other driver PgQueuer's benchmark docs recommend for throughput.
        import asyncpg

        return PgQueuer.from_asyncpg_pool(await asyncpg.create_pool(url))
    import psycopg

    return PgQueuer.from_psycopg_connection(await psycopg.AsyncConnection.connect(url, autocommit=True))


async def main(args: argparse.Namespace) -> None:
    pgq = await connect(args.url, args.driver)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @pgq.entrypoint("probe")
    async def probe(job: Job) -> None:
        protocol.started((job.payload or b"").decode())

    @pgq.entrypoint("io")
    async def io(job: Job) -> None:
        # bench/issue25.py's workload: await `ms` milliseconds of "I/O", report nothing.
        await asyncio.sleep(float(job.payload or b"10") / 1000)

    @pgq.entrypoint("hold")
    async def hold(job: Job) -> None:
        key, seconds = (job.payload or b":0").decode().rsplit(":", 1)
        protocol.started(key)
        await asyncio.sleep(float(seconds))

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, pgq.shutdown.set)
    protocol.ready()
    await pgq.run(
        batch_size=args.batch_size,
        max_concurrent_tasks=args.concurrency or None,  # 0: no cap, as PgQueuer reads it
        dequeue_timeout=timedelta(seconds=args.dequeue_timeout),
        heartbeat_timeout=timedelta(seconds=args.heartbeat_timeout),
        **({} if args.log_aggregation is None
           else {"log_aggregation_interval": timedelta(seconds=args.log_aggregation)}),
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--id", required=True, help="label only (PgQueuer ids are UUIDs)")
    parser.add_argument("--driver", choices=["asyncpg", "asyncpg-pool", "psycopg"],
                        default="asyncpg")
    parser.add_argument("--concurrency", type=int, default=0,
                        help="max_concurrent_tasks (PgQueuer default: none; 0 = none)")
    parser.add_argument("--batch-size", type=int, default=10, help="PgQueuer default 10")
    parser.add_argument("--dequeue-timeout", type=float, default=30.0,
                        help="fallback poll seconds (PgQueuer default 30)")
    parser.add_argument("--heartbeat-timeout", type=float, default=30.0,
                        help="stale-heartbeat threshold for re-picking (PgQueuer default 30)")
    parser.add_argument("--log-aggregation", type=float, default=None,
                        help="log_aggregation_interval seconds, 0 = off (PgQueuer default 30)")
    uvloop.run(main(parser.parse_args()))
