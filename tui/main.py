"""`taskboard-tui`: start the database, services and embedded workers, then the dashboard.

Everything that can fail because of the environment (unreachable database, schema from a
newer version, bad flags or settings) fails here, before the UI opens: one line on stderr
and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from taskboard.core.db import connection, ensure_schema, open_database
from taskboard.core.engine.settings import DEFAULT_LEASE_SECONDS, DEFAULT_POOL_SIZE, WorkerSettings
from taskboard.core.errors import ConfigError, TaskboardError
from taskboard.core.fleet import Fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.secrets import one_line
from taskboard.core.sql import FREE_CONNECTION_SLOTS
from taskboard.core.standins.runtime import local_runtime
from taskboard.core.training.scenario import DemoScript, demo_registry
from taskboard.tui.app import TaskboardApp

DEMO_LEASE_SECONDS = 10.0
EXIT_USAGE = 2
MAX_WORKERS = 100
MIN_REFRESH_SECONDS = 0.1
MAX_REFRESH_SECONDS = 60.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # Arguments may hold line breaks; the error stays one line.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}\n")


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """Flags of `taskboard-tui`."""
    p = _Parser(
        prog="taskboard-tui",
        description="Live lease dashboard with embedded workers. Database: "
        "TASKBOARD_DATABASE_URL or DATABASE_URL; with neither, an embedded PostgreSQL.",
    )
    p.add_argument(
        "--workers",
        type=_int,
        default=None,
        help=f"embedded workers to start, 0 to {MAX_WORKERS} (0 = observe only; default 2)",
    )
    p.add_argument(
        "--lease",
        type=_number,
        default=None,
        help=f"lease seconds, 1 to 86400 (default {DEFAULT_LEASE_SECONDS:g}, "
        f"demo {DEMO_LEASE_SECONDS:g})",
    )
    p.add_argument(
        "--pool-size",
        type=_int,
        default=DEFAULT_POOL_SIZE,
        help=f"connections per embedded worker, 3 to 1000 (default {DEFAULT_POOL_SIZE})",
    )
    p.add_argument(
        "--refresh",
        type=_number,
        default=1.0,
        help=f"seconds between refreshes, {MIN_REFRESH_SECONDS:g} to {MAX_REFRESH_SECONDS:g} "
        "(default 1)",
    )
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
    if not 0 <= workers <= MAX_WORKERS:
        raise ConfigError(f"--workers must be between 0 and {MAX_WORKERS}, got {workers}")
    if not MIN_REFRESH_SECONDS <= args.refresh <= MAX_REFRESH_SECONDS:
        raise ConfigError(
            f"--refresh must be between {MIN_REFRESH_SECONDS:g} and {MAX_REFRESH_SECONDS:g} "
            f"seconds, got {args.refresh:g}"
        )
    settings = WorkerSettings(
        lease_seconds=lease, pool_size=args.pool_size, drain_seconds=min(5.0, lease / 2)
    )
    db = await asyncio.to_thread(open_database)
    if db.embedded is not None:
        print(f"embedded PostgreSQL in {db.embedded.data_dir}", file=sys.stderr)
    try:
        await ensure_schema(db.url)
        await _check_connection_budget(db.url, workers, settings.pool_size)
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


async def _check_connection_budget(url: str, workers: int, pool_size: int) -> None:
    """Refuse, before any worker opens its pool, a fleet the server has no room for: each
    embedded worker's pool and the board's own connection."""
    if workers == 0:
        return
    needed = workers * pool_size + 1
    async with connection(url) as conn:
        cur = await conn.execute(FREE_CONNECTION_SLOTS)
        row = await cur.fetchone()
    if row is None:
        return
    free, total = int(row[0]) + 1, int(row[1])  # this check's connection is closed again
    if needed > free:
        raise ConfigError(
            f"{workers} workers with --pool-size {pool_size} need {needed} connections; the "
            f"server has {free} free (max_connections {total}): lower --workers or "
            "--pool-size, or raise max_connections"
        )


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
        print(f"taskboard-tui: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """Console-script wrapper."""
    sys.exit(main())


if __name__ == "__main__":
    run()
