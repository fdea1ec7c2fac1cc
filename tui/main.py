"""`taskboard-tui`: start the database, services and embedded workers, then the dashboard.

Everything that can fail because of the environment (unreachable database, schema from a
newer version, bad flags or settings) fails here, before the UI opens: one line on stderr
and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from taskboard.core.fleet import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_METRICS_HOST,
    DEFAULT_POOL_SIZE,
    ConfigError,
    FleetOptions,
    OneLineParser,
    TaskboardError,
    WorkerSettings,
    dashboard_logging,
    integer,
    number,
    one_line,
    open_fleet,
)
from taskboard.tui.app import TaskboardApp

DEMO_LEASE_SECONDS = 10.0
MAX_WORKERS = 100
MIN_REFRESH_SECONDS = 0.1
MAX_REFRESH_SECONDS = 60.0


def build_parser() -> argparse.ArgumentParser:
    """Flags of `taskboard-tui`."""
    p = OneLineParser(
        prog="taskboard-tui",
        description="Live lease dashboard with embedded workers. Database: "
        "TASKBOARD_DATABASE_URL or DATABASE_URL; with neither, an embedded PostgreSQL.",
    )
    p.add_argument(
        "--workers",
        type=integer,
        default=None,
        help=f"embedded workers to start, 0 to {MAX_WORKERS} (0 = observe only; default 2)",
    )
    p.add_argument(
        "--lease",
        type=number,
        default=None,
        help=f"lease seconds, 1 to 86400 (default {DEFAULT_LEASE_SECONDS:g}, "
        f"demo {DEMO_LEASE_SECONDS:g})",
    )
    p.add_argument(
        "--pool-size",
        type=integer,
        default=DEFAULT_POOL_SIZE,
        help=f"connections per embedded worker, 3 to 1000 (default {DEFAULT_POOL_SIZE})",
    )
    p.add_argument(
        "--refresh",
        type=number,
        default=1.0,
        help=f"seconds between refreshes, {MIN_REFRESH_SECONDS:g} to {MAX_REFRESH_SECONDS:g} "
        "(default 1)",
    )
    p.add_argument(
        "--metrics-port",
        type=integer,
        default=None,
        help="serve Prometheus metrics of the embedded workers on this port (0: any free one)",
    )
    p.add_argument(
        "--metrics-host",
        default=DEFAULT_METRICS_HOST,
        help=f"address to serve metrics on (default {DEFAULT_METRICS_HOST}: this host only; "
        "another address exposes them to the network)",
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
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port must be between 0 and 65535, got {args.metrics_port}")
    options = FleetOptions(
        workers=workers,
        settings=settings,
        demo=args.demo,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )

    def say_where(db: object) -> None:
        data_dir = getattr(getattr(db, "embedded", None), "data_dir", None)
        if data_dir is not None:
            print(f"embedded PostgreSQL in {data_dir}", file=sys.stderr)

    async with open_fleet(options, on_database=say_where) as opened:
        app = TaskboardApp(
            opened.fleet,
            refresh_seconds=args.refresh,
            mode_label="demo" if args.demo else opened.database.mode,
            demo=opened.scenario,
        )
        await app.run_async()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the dashboard; returns the exit code."""
    args = build_parser().parse_args(argv)
    # Workers log through `logging`; on the dashboard's terminal that would tear the
    # screen, so only errors are kept, and they go to a file if one is named.
    dashboard_logging(os.environ.get("TASKBOARD_TUI_LOG"))
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
