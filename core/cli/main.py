"""`taskboard`: the headless command line (migrate, enqueue, worker, status, retry, cancel).

Exit codes scripts can rely on:
  0  success
  2  bad input, bad configuration, unreachable database, schema from a newer version
  3  the job named does not exist or is in the wrong state (retry, cancel, history)
  4  `worker` only: it stopped itself because an unexpected error persisted (restart it)
  1  anything unexpected (a bug: please report it)
Errors are one line on stderr, never a traceback, and never carry a password.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

import psycopg
from taskboard.core.cli import report
from taskboard.core.cli.parser import build_parser
from taskboard.core.cli.worker import run_worker, worker_settings
from taskboard.core.db import connection, open_database
from taskboard.core.engine.schema import migrate
from taskboard.core.errors import JobNotFound, TaskboardError, ValidationError
from taskboard.core.jobs import NewJob, cancel, enqueue_many, retry, validate_job
from taskboard.core.kinds import builtin_registry
from taskboard.core.secrets import mask_dsn, scrub

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `taskboard`; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        code = asyncio.run(_dispatch(args))
    except KeyboardInterrupt:
        code = 130
    except TaskboardError as exc:
        print(f"taskboard {args.command}: error: {_one_line(str(exc))}", file=sys.stderr)
        code = EXIT_NOT_FOUND if isinstance(exc, JobNotFound) else exc.exit_code
    except psycopg.Error as exc:
        # Refused by the database (privileges, a read-only replica...): the server's own
        # words on one line, never a traceback.
        detail = _one_line(str(exc)) or type(exc).__name__
        print(f"taskboard {args.command}: error: database refused: {detail}", file=sys.stderr)
        code = EXIT_USAGE
    return code


def run() -> None:
    """Console-script wrapper: exit with `main`'s code."""
    sys.exit(main())


def _one_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return scrub(mask_dsn(first))


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "enqueue":
        # Validate before touching the database: bad input writes nothing, starts nothing.
        job = _job_from_args(args)
    elif args.command == "worker":
        settings = worker_settings(args)
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
                return await report.status(conn, db, args.json)
            if args.command == "retry":
                await retry(conn, args.job_id)
                print(f"job {args.job_id} is pending again")
                return EXIT_OK
            if args.command == "cancel":
                await cancel(conn, args.job_id)
                print(f"job {args.job_id} cancelled")
                return EXIT_OK
            if args.command == "history":
                return await report.history(conn, args.job_id, args.json)
        assert args.command == "worker"
        return await run_worker(db, settings, args)
    finally:
        await asyncio.to_thread(db.close)


def _job_from_args(args: argparse.Namespace) -> NewJob:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"is not valid JSON ({exc.msg} at char {exc.pos})", field="payload"
        ) from None
    except RecursionError:
        raise ValidationError("is nested too deeply to read", field="payload") from None
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
