"""`taskboard-tui`: start the database, services and embedded workers, then the dashboard.

Everything that can fail because of the environment (unreachable database, schema from a
newer version, bad flags or settings, no terminal) fails here, before the UI opens: one line
on stderr and exit code 2, never a traceback.

With --serve the dashboard is served to a browser instead (see `serve`): each browser
session runs `taskboard-tui` with the same flags minus the serving ones; with --demo each in
a demo database of its own (--room), without it every tab after the first --read-only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence

from taskboard.core.fleet import (
    APP_HELP,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_METRICS_HOST,
    DEFAULT_POOL_SIZE,
    ConfigError,
    FleetOptions,
    OneLineParser,
    TaskboardError,
    WorkerSettings,
    add_version_flag,
    dashboard_logging,
    integer,
    name_sessions,
    number,
    one_line,
)
from taskboard.tui.serve_defaults import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SESSIONS
from taskboard.tui.terminal import need_a_terminal, say_drain, say_where, served_session

DEMO_LEASE_SECONDS = 10.0
# Thirty trainees' stories on one server: two workers of 3 connections each per story.
DEMO_POOL_SIZE = 3
MAX_SESSIONS = 200
MAX_WORKERS = 100
MIN_REFRESH_SECONDS = 0.1
MAX_REFRESH_SECONDS = 60.0
# Flags of the serving process only; every other flag is handed to each browser session.
SERVE_FLAGS = frozenset({"serve", "port", "host", "sessions"})


def build_parser() -> argparse.ArgumentParser:
    """Flags of `taskboard-tui`."""
    p = OneLineParser(
        prog="taskboard-tui",
        description="Live lease dashboard with embedded workers. Database: "
        "TASKBOARD_DATABASE_URL or DATABASE_URL; with neither, an embedded PostgreSQL.",
    )
    add_version_flag(p)
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
        default=None,
        help=f"connections per embedded worker, 3 to 1000 (default {DEFAULT_POOL_SIZE}, "
        f"demo {DEMO_POOL_SIZE})",
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
    p.add_argument("--app", default=None, metavar="MODULE:ATTR", help=APP_HELP)
    p.add_argument(
        "--read-only",
        action="store_true",
        help="watch the board only: no embedded workers, every key that changes anything "
        "greyed (what a second browser tab of --serve gets)",
    )
    # A browser session's own demo database; given by --serve --demo to each session.
    p.add_argument("--room", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--serve",
        action="store_true",
        help="serve the dashboard to a browser (textual-serve) instead of drawing it here: "
        "with --demo a story of its own per tab, without it one tab in control and the "
        "others read-only",
    )
    p.add_argument(
        "--sessions",
        type=integer,
        default=None,
        help=f"with --serve --demo: browser sessions at once, 1 to {MAX_SESSIONS} "
        f"(default {DEFAULT_SESSIONS}); a tab beyond them is told the room is full",
    )
    p.add_argument(
        "--port",
        type=integer,
        default=None,
        help=f"with --serve: port to listen on, 0 to 65535 (0: any free one; "
        f"default {DEFAULT_PORT})",
    )
    p.add_argument(
        "--host",
        default=None,
        help=f"with --serve: address to listen on (default {DEFAULT_HOST}: this host only; "
        "any other address lets everyone who can reach it control the workers)",
    )
    return p


def served_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The flags a browser session's dashboard is started with: the user's own, minus the
    serving ones, rebuilt from the parsed values (so abbreviations and `--x=y` forms need
    no parsing here, and a flag added later is handed on without a change here)."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in SERVE_FLAGS | {"help", "version"}:
            continue
        value = getattr(args, action.dest)
        if value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        argv += [flag] if action.nargs == 0 else [flag, str(value)]
    return argv


def fleet_options(args: argparse.Namespace) -> FleetOptions:
    """What the flags ask for, checked (`ConfigError` names the flag and its range)."""
    lease = (
        args.lease
        if args.lease is not None
        else (DEMO_LEASE_SECONDS if args.demo else DEFAULT_LEASE_SECONDS)
    )
    workers = args.workers if args.workers is not None else 2
    if args.read_only:
        workers = 0
    if args.room is not None and not args.demo:
        raise ConfigError("--room is for --demo")
    pool = args.pool_size
    if pool is None:
        pool = DEMO_POOL_SIZE if args.demo else DEFAULT_POOL_SIZE
    if not 0 <= workers <= MAX_WORKERS:
        raise ConfigError(f"--workers must be between 0 and {MAX_WORKERS}, got {workers}")
    if not MIN_REFRESH_SECONDS <= args.refresh <= MAX_REFRESH_SECONDS:
        raise ConfigError(
            f"--refresh must be between {MIN_REFRESH_SECONDS:g} and {MAX_REFRESH_SECONDS:g} "
            f"seconds, got {args.refresh:g}"
        )
    settings = WorkerSettings(
        lease_seconds=lease, pool_size=pool, drain_seconds=min(5.0, lease / 2)
    )
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port must be between 0 and 65535, got {args.metrics_port}")
    return FleetOptions(
        workers=workers,
        settings=settings,
        demo=args.demo,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        app=args.app,
        room=args.room,
    )


def serve_address(args: argparse.Namespace) -> tuple[str, int] | None:
    """Where --serve listens, checked; None without --serve."""
    if not args.serve:
        if args.port is not None or args.host is not None:
            raise ConfigError("--port and --host are for --serve")
        if args.sessions is not None:
            raise ConfigError("--sessions is for --serve --demo")
        return None
    if args.sessions is not None and not args.demo:
        raise ConfigError("--sessions is for --serve --demo (plain --serve has one tab in "
                          "control and any number read-only)")
    if args.sessions is not None and not 1 <= args.sessions <= MAX_SESSIONS:
        raise ConfigError(f"--sessions must be between 1 and {MAX_SESSIONS}, got {args.sessions}")
    if args.room is not None or args.read_only:
        raise ConfigError("--room and --read-only are for a session's dashboard, not --serve")
    port = DEFAULT_PORT if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {port}")
    host = DEFAULT_HOST if args.host is None else args.host.strip()
    if not host:
        raise ConfigError("--host must not be empty")
    return host, port


async def _main(args: argparse.Namespace) -> int:
    # Imported here, not at the top: Textual and the fleet take a second to import, which
    # `--help` and a refused flag should not wait for.
    from taskboard.core.fleet import open_fleet
    from taskboard.tui.app import TaskboardApp
    from taskboard.tui.read_only import READ_ONLY_REASON, read_only

    options = fleet_options(args)
    # A browser session's stderr goes to the serving terminal: a line per ended tab's drain
    # would only crowd it.
    async with open_fleet(options, on_database=say_where, before_start=need_a_terminal,
                          on_drain=None if served_session() else say_drain) as opened:
        watching = READ_ONLY_REASON if args.read_only else None
        app = TaskboardApp(
            read_only(opened.fleet) if watching else opened.fleet,
            refresh_seconds=args.refresh,
            mode_label=("demo" if args.demo else opened.database.mode)
            + (" · read-only" if watching else ""),
            demo=None if watching else opened.scenario,
            read_only=watching,
        )
        # SIGTERM (a supervisor, `kill`) and SIGHUP (the terminal or ssh session gone) end
        # the app as `q` does: the terminal is restored and the embedded workers drain when
        # the fleet closes, instead of the process dying with its leases left to expire.
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, app.exit)
        await app.run_async()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the dashboard; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # pg_stat_activity tells the dashboard's own sessions from its embedded workers'
    # (`taskboard-worker:<id>`); a URL's application_name wins.
    name_sessions("taskboard-tui")
    # Workers log through `logging`; on the dashboard's terminal that would tear the
    # screen, so only errors are kept, and they go to a file if one is named.
    dashboard_logging(os.environ.get("TASKBOARD_TUI_LOG"))
    try:
        address = serve_address(args)
        if address is not None:
            from taskboard.tui.serve import serve

            host, port = address
            options = fleet_options(args)
            arguments = served_arguments(parser, args)
            sessions = args.sessions if args.sessions is not None else DEFAULT_SESSIONS
            return asyncio.run(
                serve(options, arguments, host=host, port=port, on_database=say_where,
                      sessions=sessions)
            )
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
