"""One procrastinate worker process for the benchmarks.

Tasks: `noop`, `io(ms)` (awaits ms milliseconds), `probe(key)` (reports its start),
`hold(key, seconds)` (reports, then sleeps).
Worker options are procrastinate's own (defaults as documented unless a flag changes them:
concurrency 1 and the connector's psycopg_pool of 4 connections when none is given).
`--retry-stalled` adds the stalled-job rescue that procrastinate's docs ask users to write
("Retry stalled jobs": a periodic task calling `get_stalled_jobs` then `retry_job`); here
it runs every second, the finest schedule a cron expression with a seconds field allows.
Without it, procrastinate never re-runs a job whose worker was SIGKILLed.
SIGTERM stops the worker gracefully (procrastinate's own signal handling).
"""

from __future__ import annotations

import argparse
import asyncio

import procrastinate
import protocol


def build_app(url: str, *, pool_size: int | None = None, retry_stalled: bool = False,
              stalled_after: float = 30.0) -> procrastinate.App:
    """The procrastinate app with the bench tasks (the harness uses it to defer jobs).

    `pool_size` None leaves the connector's pool at psycopg_pool's defaults (4 connections).
    """
    pool = {} if pool_size is None else {"min_size": 1, "max_size": pool_size}
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, **pool))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    @app.task(name="probe")
    async def probe(key: str) -> None:
        protocol.started(key)

    @app.task(name="io")
    async def io(ms: float = 10.0) -> None:
        await asyncio.sleep(ms / 1000)

    @app.task(name="hold")
    async def hold(key: str, seconds: float) -> None:
        protocol.started(key)
        await asyncio.sleep(seconds)

    if retry_stalled:
        @app.periodic(cron="* * * * * *")  # croniter's optional sixth field: seconds
        @app.task(queueing_lock="retry_stalled_jobs", pass_context=True)
        async def retry_stalled_jobs(context: object, timestamp: int) -> None:
            stalled = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=stalled_after)
            for job in stalled:
                await app.job_manager.retry_job(job)

    return app


async def main(args: argparse.Namespace) -> None:
    app = build_app(args.url, pool_size=args.pool_size, retry_stalled=args.retry_stalled,
                    stalled_after=args.stalled_after)
    async with app.open_async():
        protocol.ready()
        await app.run_worker_async(
            name=args.id,
            concurrency=args.concurrency,
            fetch_job_polling_interval=args.poll,
            update_heartbeat_interval=args.heartbeat,
            stalled_worker_timeout=args.stalled_timeout,
            install_signal_handlers=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--concurrency", type=int, default=1, help="procrastinate default 1")
    parser.add_argument("--pool-size", type=int, default=None,
                        help="connection pool size (default: psycopg_pool's, 4)")
    parser.add_argument("--poll", type=float, default=5.0,
                        help="fetch_job_polling_interval (procrastinate default 5)")
    parser.add_argument("--heartbeat", type=float, default=10.0,
                        help="update_heartbeat_interval (procrastinate default 10)")
    parser.add_argument("--stalled-timeout", type=float, default=30.0,
                        help="stalled_worker_timeout (procrastinate default 30)")
    parser.add_argument("--retry-stalled", action="store_true",
                        help="add the documented retry-stalled-jobs periodic task, every second")
    parser.add_argument("--stalled-after", type=float, default=30.0,
                        help="seconds_since_heartbeat given to get_stalled_jobs (default 30)")
    asyncio.run(main(parser.parse_args()))
