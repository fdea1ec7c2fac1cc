"""`taskboard`: the headless command line (migrate, enqueue, worker, status, retry, cancel).

Exit codes scripts can rely on:
  0  success
  2  bad input, bad configuration, unreachable database, schema from a newer version
  3  the job named does not exist or is in the wrong state (retry, cancel, history)
  1  anything unexpected (a bug: please report it)
Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

import psycopg
from taskboard.core import logs
from taskboard.core.db import Database, connection, open_database
from taskboard.core.engine.events import EventBus
from taskboard.core.engine.schema import SCHEMA_VERSION, migrate
from taskboard.core.engine.settings import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_POOL_SIZE,
    WorkerSettings,
    default_worker_id,
    mask_dsn,
)
from taskboard.core.errors import JobNotFound, TaskboardError, ValidationError
from taskboard.core.jobs import NewJob, cancel, enqueue_many, retry
from taskboard.core.kinds import builtin_registry
from taskboard.core.status import job_history, read_board

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

log = logging.getLogger("taskboard.cli")


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        # Arguments may hold line breaks; the error must stay one line for scripts.
        one_line = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line}\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _job_id(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"job ids are positive integers, got {text}")
    return value


def _timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-12-02T10:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} needs a timezone (e.g. Z or +01:00)")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests of argument handling)."""
    parser = _Parser(
        prog="taskboard",
        description="PostgreSQL job queue with fenced leases. Database: TASKBOARD_DATABASE_URL "
        "or DATABASE_URL; with neither, an embedded PostgreSQL under your data directory.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("migrate", help="apply the schema (also done automatically on start)")

    p = sub.add_parser("enqueue", help="add a job")
    p.add_argument("kind", help="job kind: noop, sleep, email, billing, or one you registered")
    p.add_argument("--payload", default="{}", help="JSON object (default {})")
    p.add_argument("--run-at", type=_timestamp, help="ISO 8601 time with timezone")
    p.add_argument("--priority", type=_int, default=0, help="higher runs first (default 0)")
    p.add_argument("--queue", default="default", help="queue name (default 'default')")
    p.add_argument("--max-attempts", type=_int, default=5, help="claims before dead (default 5)")

    p = sub.add_parser("worker", help="run a headless worker (structured logs on stderr)")
    p.add_argument("--id", dest="worker_id", default=None, help="worker id (default host-pid)")
    p.add_argument(
        "--lease",
        type=_positive_float,
        default=DEFAULT_LEASE_SECONDS,
        help=f"lease seconds (default {DEFAULT_LEASE_SECONDS:g})",
    )
    p.add_argument(
        "--renew-every",
        type=_positive_float,
        default=None,
        help="renewal interval seconds (default lease/3)",
    )
    p.add_argument(
        "--pool-size",
        type=_int,
        default=DEFAULT_POOL_SIZE,
        help=f"connections (default {DEFAULT_POOL_SIZE}; at most size-2 jobs at once)",
    )
    p.add_argument(
        "--queue",
        dest="queues",
        action="append",
        default=None,
        help="queue to work (repeatable; default 'default')",
    )
    p.add_argument(
        "--poll",
        type=_positive_float,
        default=5.0,
        help="fallback poll seconds when no NOTIFY arrives (default 5)",
    )
    p.add_argument(
        "--drain-timeout",
        type=_non_negative_float,
        default=10.0,
        help="seconds to finish in-flight work on SIGINT/SIGTERM before releasing",
    )
    p.add_argument(
        "--retry-base", type=_non_negative_float, default=2.0, help="first retry backoff seconds"
    )
    p.add_argument("--log-format", choices=["json", "text"], default="json")
    p.add_argument("--log-level", choices=["debug", "info", "warning"], default="info")

    p = sub.add_parser("status", help="counts by state, workers, claims with seconds left")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("retry", help="make a dead or cancelled job pending again")
    p.add_argument("job_id", type=_job_id)
    p = sub.add_parser("cancel", help="cancel an unfinished job")
    p.add_argument("job_id", type=_job_id)
    p = sub.add_parser("history", help="the attempts of one job (claims, reclaims, outcomes)")
    p.add_argument("job_id", type=_job_id)
    p.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `taskboard`; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        code = asyncio.run(_dispatch(args))
    except KeyboardInterrupt:
        code = 130
    except TaskboardError as exc:
        print(f"taskboard {args.command}: error: {exc}", file=sys.stderr)
        code = EXIT_NOT_FOUND if isinstance(exc, JobNotFound) else exc.exit_code
    except psycopg.Error as exc:
        # Refused by the database (privileges, a read-only replica...): the server's own
        # words on one line, never a traceback.
        detail = mask_dsn(str(exc).strip().splitlines()[0]) if str(exc).strip() else ""
        print(
            f"taskboard {args.command}: error: database refused: {detail or type(exc).__name__}",
            file=sys.stderr,
        )
        code = EXIT_USAGE
    return code


def run() -> None:
    """Console-script wrapper: exit with `main`'s code."""
    sys.exit(main())


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "enqueue":
        # Validate before touching the database: bad input writes nothing, starts nothing.
        job = _job_from_args(args)
    elif args.command == "worker":
        settings = _worker_settings(args)
    db = await asyncio.to_thread(open_database)
    if db.embedded is not None and args.command != "worker":  # the worker logs it as JSON
        print(f"embedded PostgreSQL in {db.embedded.data_dir}", file=sys.stderr)
    try:
        async with connection(db.url) as conn:
            version = await migrate(conn)
            if args.command == "migrate":
                print(f"schema at version {version} ({db.masked})")
                return EXIT_OK
            if args.command == "enqueue":
                [job_id] = await enqueue_many(conn, builtin_registry(), [job])
                print(job_id)
                return EXIT_OK
            if args.command == "status":
                return await _status(conn, db, args.json)
            if args.command == "retry":
                await retry(conn, args.job_id)
                print(f"job {args.job_id} is pending again")
                return EXIT_OK
            if args.command == "cancel":
                await cancel(conn, args.job_id)
                print(f"job {args.job_id} cancelled")
                return EXIT_OK
            if args.command == "history":
                return await _history(conn, args.job_id, args.json)
        assert args.command == "worker"
        return await _run_worker(db, settings, args)
    finally:
        await asyncio.to_thread(db.close)


def _job_from_args(args: argparse.Namespace) -> NewJob:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"is not valid JSON ({exc.msg} at char {exc.pos})", field="payload"
        ) from None
    from taskboard.core.jobs import validate_job

    return validate_job(
        builtin_registry(),
        NewJob(
            kind=args.kind,
            payload=payload,
            queue=args.queue,
            priority=args.priority,
            run_at=args.run_at,
            max_attempts=args.max_attempts,
        ),
    )


def _worker_settings(args: argparse.Namespace) -> WorkerSettings:
    return WorkerSettings(
        lease_seconds=args.lease,
        renew_every=args.renew_every,
        pool_size=args.pool_size,
        queues=tuple(args.queues or ["default"]),
        poll_seconds=args.poll,
        drain_seconds=args.drain_timeout,
        retry_base_seconds=args.retry_base,
        retry_max_seconds=max(600.0, args.retry_base),
        worker_id=args.worker_id or default_worker_id(),
    )


async def _run_worker(db: Database, settings: WorkerSettings, args: argparse.Namespace) -> int:
    from taskboard.core.engine.worker import Worker
    from taskboard.core.standins.runtime import local_services

    logs.configure(args.log_format, getattr(logging, args.log_level.upper()))
    bus = EventBus()
    bus.subscribe(logs.EventLogger())
    if db.embedded is not None:
        log.info("embedded PostgreSQL", extra={"fields": {"data_dir": str(db.embedded.data_dir)}})
    async with local_services(os.environ) as services:
        log.info(
            "worker starting",
            extra={
                "fields": {
                    "worker": settings.worker_id,
                    "database": db.masked,
                    "lease": settings.lease_seconds,
                    "pool": settings.pool_size,
                    "capacity": settings.capacity,
                    "services": services.describe(),
                }
            },
        )
        worker = Worker(
            db.url, registry=builtin_registry(), settings=settings, services=services, bus=bus
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, worker.drain)
        await worker.run()
    return EXIT_OK


async def _status(conn: Any, db: Database, as_json: bool) -> int:
    board = await read_board(conn, database=db.masked, mode=db.mode, claims_limit=1000)
    now = board.db_now
    if as_json:
        out = {
            "database": board.database,
            "db_now": now.isoformat(),
            "schema_version": SCHEMA_VERSION,
            "counts": board.counts.__dict__,
            "workers": [
                {
                    "id": w.id,
                    "host": w.host,
                    "pid": w.pid,
                    "state": w.state,
                    "in_flight": w.in_flight,
                    "capacity": w.capacity,
                    "heartbeat_age": round((now - w.heartbeat_at).total_seconds(), 3),
                    "renewals_ok": w.renewals_ok,
                    "renewals_failed": w.renewals_failed,
                }
                for w in board.workers
            ],
            "claims": [
                {
                    "job_id": c.job_id,
                    "kind": c.kind,
                    "worker": c.worker_id,
                    "token": c.token,
                    "attempt": c.attempt,
                    "seconds_left": round(c.seconds_left(now), 3),
                }
                for c in board.claims
            ],
        }
        print(json.dumps(out, indent=2))
        return EXIT_OK
    c = board.counts
    print(f"database {board.database}  db time {now:%Y-%m-%d %H:%M:%S %Z}")
    print(
        f"jobs: pending {c.pending}  scheduled {c.scheduled}  claimed {c.claimed}  "
        f"expired {c.expired}  completed {c.completed}  dead {c.dead}  cancelled {c.cancelled}"
    )
    print(f"workers ({len(board.workers)}):")
    for w in board.workers:
        age = (now - w.heartbeat_at).total_seconds()
        print(
            f"  {w.id:<24} {w.state:<9} {w.in_flight}/{w.capacity} in flight  "
            f"heartbeat {age:5.1f}s ago  renewals {w.renewals_ok} ok / {w.renewals_failed} failed"
        )
    print(f"claims ({board.claims_total}):")
    for cl in board.claims:
        left = cl.seconds_left(now)
        shown = f"{left:6.1f}s left" if left > 0 else "  EXPIRED  "
        print(
            f"  job {cl.job_id:<8} {cl.kind:<8} {cl.worker_id:<24} token {cl.short_token}  "
            f"attempt {cl.attempt}/{cl.max_attempts}  {shown}"
        )
    return EXIT_OK


async def _history(conn: Any, job_id: int, as_json: bool) -> int:
    rows = await job_history(conn, job_id)
    if not rows:
        raise JobNotFound(f"job {job_id} has no attempts (or does not exist)")
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return EXIT_OK
    for r in rows:
        print(
            f"attempt {r['attempt']}  token {r['token'][:8]}  worker {r['worker']}  "
            f"claimed {r['claimed_at']:%H:%M:%S.%f}  outcome {r['outcome'] or 'running'}"
        )
    return EXIT_OK


