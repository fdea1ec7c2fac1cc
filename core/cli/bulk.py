"""`taskboard retry` and `taskboard cancel`: one job by id, or every job a filter names."""

from __future__ import annotations

import argparse
from typing import Any

from psycopg import AsyncConnection
from taskboard.core.base.errors import ConfigError
from taskboard.core.base.secrets import one_line
from taskboard.core.operations.job_bulk import (
    BulkResult,
    JobFilter,
    cancel_matching,
    preview,
    retry_matching,
)
from taskboard.core.queue.jobs import cancel, retry

EXIT_OK = 0
SHOWN_REFUSALS = 5


def job_filter(args: argparse.Namespace) -> JobFilter:
    """The filter the flags name (checked against a job id given too)."""
    f = JobFilter(
        kind=args.kind, queue=args.queue, state=args.state, error=args.error,
        since_seconds=args.since,
    )
    if args.job_id is not None and (not f.is_empty() or args.dry_run):
        raise ConfigError(
            f"{args.command}: give a job id or filters (--kind, --queue, ...), not both"
        )
    return f


async def run(conn: AsyncConnection[Any], args: argparse.Namespace) -> int:
    """Retry or cancel one job, or every job the filter names (`--dry-run`: count only)."""
    f = job_filter(args)
    verb = "retried" if args.command == "retry" else "cancelled"
    if args.job_id is not None:
        if args.command == "retry":
            await retry(conn, args.job_id)
            print(f"job {args.job_id} is pending again")
        else:
            # A worker running the job hears it at once (NOTIFY) and stops its handler.
            await cancel(conn, args.job_id)
            print(f"job {args.job_id} cancelled")
        return EXIT_OK
    if args.dry_run:
        p = await preview(conn, args.command, f)
        shown = _ids(p.first_ids, p.count)
        print(f"would have {verb} {_jobs(p.count)} matching {f.describe()}{shown}; "
              "nothing changed (dry run)")
        return EXIT_OK
    act = retry_matching if args.command == "retry" else cancel_matching
    done = await act(conn, f, batch=args.batch)
    for line in _result_lines(verb, f, done):
        print(line)
    return EXIT_OK


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _ids(ids: tuple[int, ...] | list[int], count: int) -> str:
    if not ids:
        return ""
    more = ", ..." if count > len(ids) else ""
    return ": " + ", ".join(f"#{i}" for i in ids) + more


def _result_lines(verb: str, f: JobFilter, r: BulkResult) -> list[str]:
    lines = [
        f"{verb} {_jobs(r.done)} matching {f.describe()} in {r.batches} "
        f"batch{'' if r.batches == 1 else 'es'}"
        + _ids(r.first_ids, r.done)
    ]
    if r.refused:
        lines.append(f"{len(r.refused)} left as they were:")
        lines += [f"  {one_line(reason)}" for reason in r.refused[:SHOWN_REFUSALS]]
        if len(r.refused) > SHOWN_REFUSALS:
            lines.append(f"  ... and {len(r.refused) - SHOWN_REFUSALS} more")
    return lines
