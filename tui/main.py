"""`taskboard-tui`: start the database, services and embedded workers, then the dashboard.

Everything that can fail because of the environment (unreachable database, schema from a
newer version, bad flags or settings) fails here, before the UI opens: one line on stderr
and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from taskboard.core.db import ensure_schema, open_database
from taskboard.core.engine.settings import DEFAULT_LEASE_SECONDS, DEFAULT_POOL_SIZE, WorkerSettings
from taskboard.core.errors import TaskboardError
from taskboard.core.fleet import Fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.standins.runtime import local_runtime
from taskboard.core.training.scenario import DemoScript, demo_registry
from taskboard.tui.app import TaskboardApp

DEMO_LEASE_SECONDS = 10.0
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Flags of `taskboard-tui`."""
    p = _Parser(
        prog="taskboard-tui",
        description="Live lease dashboard with embedded workers. Database: "
        "TASKBOARD_DATABASE_URL or DATABASE_URL; with neither, an embedded PostgreSQL.",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="embedded workers to start (0 = observe only; default 2, demo 2)",
    )
    p.add_argument(
        "--lease",
        type=float,
        default=None,
        help=f"lease seconds (default {DEFAULT_LEASE_SECONDS:g}, demo {DEMO_LEASE_SECONDS:g})",
    )
    p.add_argument(
        "--pool-size",
        type=int,
        default=DEFAULT_POOL_SIZE,
        help=f"connections per embedded worker (default {DEFAULT_POOL_SIZE})",
    )
    p.add_argument("--refresh", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument(
        "--demo",
        action="store_true",
        help="training scenario: short lease and a guided replay of the article",
    )
    return p


async def _main(args: argparse.Namespace) -> int:
    lease = (
        args.lease
        if args.lease is not None
        else (DEMO_LEASE_SECONDS if args.demo else DEFAULT_LEASE_SECONDS)
    )
    workers = args.workers if args.workers is not None else 2
    if workers < 0:
        raise TaskboardError(f"--workers must be 0 or more, got {workers}")
    if args.refresh <= 0:
        raise TaskboardError(f"--refresh must be positive, got {args.refresh}")
    settings = WorkerSettings(
        lease_seconds=lease, pool_size=args.pool_size, drain_seconds=min(5.0, lease / 2)
    )
    db = await asyncio.to_thread(open_database)
    if db.embedded is not None:
        print(f"embedded PostgreSQL in {db.embedded.data_dir}", file=sys.stderr)
    try:
        await ensure_schema(db.url)
        async with local_runtime(os.environ) as runtime:
            registry = demo_registry(lease) if args.demo else builtin_registry()
            fleet = Fleet(
                db,
                runtime,
                registry,
                settings=settings,
                mode="demo" if args.demo else db.mode,
                name_prefix="worker" if args.demo else None,
                sample_sleep_seconds=lease / 2 if args.demo else None,
            )
            await fleet.start(workers)
            try:
                await fleet.refresh()  # fail before the UI opens if the board cannot be read
                app = TaskboardApp(
                    fleet,
                    refresh_seconds=args.refresh,
                    mode_label="demo" if args.demo else db.mode,
                    demo=DemoScript() if args.demo else None,
                )
                await app.run_async()
            finally:
                await fleet.close()
    finally:
        await asyncio.to_thread(db.close)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the dashboard; returns the exit code."""
    args = build_parser().parse_args(argv)
    # Workers log through `logging`; on the dashboard's terminal that would tear the
    # screen, so only errors are kept, and they go to a file if one is named.
    log_file = os.environ.get("TASKBOARD_TUI_LOG")
    logging.basicConfig(
        level=logging.INFO if log_file else logging.CRITICAL,
        filename=log_file,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        return asyncio.run(_main(args))
    except TaskboardError as exc:
        print(f"taskboard-tui: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """Console-script wrapper."""
    sys.exit(main())


if __name__ == "__main__":
    run()
