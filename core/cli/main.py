"""`taskboard`: the headless command line (migrate, enqueue, worker, status, history, advise,
retry, cancel, health, prune, schedule, queue).

Exit codes scripts can rely on:
  0  success
  2  bad input, bad configuration, unreachable database (but `worker`: 5), schema from a
     newer version
  3  the job named does not exist or is in the wrong state (retry, cancel, history,
     result: not finished yet, dead, cancelled, missing or pruned), the
     schedule named does not exist (schedule remove), the queue is not paused (queue resume)
  4  `worker` only: it stopped itself because an unexpected error persisted (restart it)
  5  `worker` only: the database could not be reached, or did not answer, for a lease at
     start (a failover under way is waited out), or with --burst for a lease while running
  1  anything unexpected (a bug: please report it)
Errors are one line on stderr, never a traceback, and never carry a password.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection
from taskboard.core.base import libpq_settings
from taskboard.core.base.errors import (
    DatabaseUnavailable,
    JobNotFound,
    TaskboardError,
    ValidationError,
)
from taskboard.core.base.secrets import one_line
from taskboard.core.cli import bulk, history, operations, report
from taskboard.core.cli.parser import build_parser
from taskboard.core.cli.worker import EXIT_UNREACHABLE, run_worker, worker_settings
from taskboard.core.engine.schema import migrate
from taskboard.core.kinds import KindRegistry
from taskboard.core.kinds.app_loading import app_spec, load_registry
from taskboard.core.kinds.payload_rules import MAX_PAYLOAD_DEPTH
from taskboard.core.operations.schedules import Schedule, check_schedule
from taskboard.core.queue.jobs import NewJob, validate_job
from taskboard.core.runtime import event_loop
from taskboard.core.runtime.db import Database, connection, open_database

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `taskboard`; returns the exit code."""
    args = build_parser().parse_args(argv)
    # pg_stat_activity shows which command a session belongs to (a worker's own sessions
    # say `taskboard-worker:<id>`); a URL's application_name wins.
    libpq_settings.name_sessions(f"taskboard-cli:{args.command}")
    try:
        code = event_loop.runner()(_dispatch(args))
    except KeyboardInterrupt:
        code = 130
    except TaskboardError as exc:
        print(f"{_prog(args)}: error: {one_line(str(exc))}", file=sys.stderr)
        code = _exit_code(args, exc)
    except psycopg.Error as exc:
        # Refused by the database (privileges, a read-only replica...): the server's own
        # words on one line, never a traceback.
        detail = one_line(_first_line(str(exc))) or type(exc).__name__
        print(f"{_prog(args)}: error: database refused: {detail}", file=sys.stderr)
        code = EXIT_USAGE
    return code


def _exit_code(args: argparse.Namespace, exc: TaskboardError) -> int:
    if isinstance(exc, JobNotFound):
        return EXIT_NOT_FOUND
    if args.command == "worker" and isinstance(exc, DatabaseUnavailable):
        # Waited out for a lease already (cli/worker.py: preflight), so not bad usage (2):
        # a supervisor should try again later, as after a burst run that met an
        # unreachable database.
        return EXIT_UNREACHABLE
    return exc.exit_code


def run() -> None:
    """Console-script wrapper: exit with `main`'s code."""
    sys.exit(main())


def _prog(args: argparse.Namespace) -> str:
    """`taskboard enqueue`, `taskboard schedule add`...: who is speaking in an error."""
    action = getattr(args, "action", None)
    return f"taskboard {args.command}" + (f" {action}" if action else "")


def _first_line(text: str) -> str:
    """The server's message without its DETAIL and HINT lines."""
    return text.strip().split("\n", 1)[0]


async def _dispatch(args: argparse.Namespace) -> int:
    # Validate before touching the database: bad input writes nothing, starts nothing.
    # The app is loaded first: its kinds decide what a payload may hold.
    registry = load_registry(app_spec(getattr(args, "app", None)))
    job = _job_from_args(args, registry) if args.command == "enqueue" else None
    settings = worker_settings(args) if args.command == "worker" else None
    schedule = (
        _schedule_from_args(args, registry)
        if args.command == "schedule" and args.action == "add"
        else None
    )
    db = await asyncio.to_thread(open_database)
    if db.embedded is not None and args.command != "worker":  # the worker logs it as JSON
        print(f"embedded PostgreSQL in {db.embedded.data_dir}", file=sys.stderr)
    try:
        if settings is not None:
            return await run_worker(db, settings, args, registry)
        async with connection(db.url) as conn:
            version = await migrate(conn)
            if args.command == "migrate":
                print(f"schema at version {version} ({db.masked})")
                return EXIT_OK
            return await _command(conn, db, args, job, schedule, registry)
    finally:
        await asyncio.to_thread(db.close)


async def _command(
    conn: AsyncConnection[Any],
    db: Database,
    args: argparse.Namespace,
    job: NewJob | None,
    schedule: Schedule | None,
    registry: KindRegistry,
) -> int:
    if job is not None:
        return await operations.enqueue(conn, job, registry)
    if args.command == "status":
        return await report.status(conn, db, args.json)
    if args.command in ("retry", "cancel"):
        return await bulk.run(conn, args)
    if args.command == "history":
        return await history.history(conn, args.job_id, args.json)
    if args.command == "result":
        return await history.result(conn, args.job_id, args.wait, args.json)
    if args.command == "advise":
        return await history.advise(conn, args.json, registry, args.recovery)
    if args.command == "health":
        return await operations.health(conn, args)
    if args.command == "prune":
        return await operations.run_prune(conn, args)
    if args.command == "schedule":
        return await operations.schedule(conn, args, schedule, registry)
    assert args.command == "queue", args.command
    return await operations.queue(conn, args)


def _payload(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"is not valid JSON ({exc.msg} at char {exc.pos})", field="payload"
        ) from None
    except RecursionError:
        raise ValidationError(
            f"is nested deeper than {MAX_PAYLOAD_DEPTH} levels", field="payload"
        ) from None


def _job_from_args(args: argparse.Namespace, registry: KindRegistry) -> NewJob:
    return validate_job(
        registry,
        NewJob(
            kind=args.kind,
            payload=_payload(args.payload),
            queue=args.queue,
            priority=args.priority,
            run_at=args.run_at,
            max_attempts=args.max_attempts,
            timeout=args.timeout,
            unique_key=args.key,
            after=tuple(args.after),
        ),
    )


def _kind_attempts(args: argparse.Namespace, registry: KindRegistry) -> int:
    """--max-attempts, else the kind's, else 5 (a schedule stores its number)."""
    if args.max_attempts is not None:
        return int(args.max_attempts)
    kind = registry.find(args.kind)
    return kind.max_attempts if kind is not None and kind.max_attempts is not None else 5


def _schedule_from_args(args: argparse.Namespace, registry: KindRegistry) -> Schedule:
    payload = _payload(args.payload)
    if not isinstance(payload, dict):
        raise ValidationError("must be a JSON object", field="payload")
    return check_schedule(
        registry,
        Schedule(
            name=args.name,
            cron=args.cron,
            kind=args.kind,
            payload=payload,
            queue=args.queue,
            priority=args.priority,
            max_attempts=_kind_attempts(args, registry),
            timeout_seconds=args.timeout,
            tz=args.tz,
        ),
    )
