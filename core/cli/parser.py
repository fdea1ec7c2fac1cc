"""The `taskboard` argument parser: every flag, its type, and one-line errors (exit 2)."""

from __future__ import annotations

import argparse
from datetime import datetime

from taskboard.core.base.errors import ConfigError
from taskboard.core.cli.parser_ops import (
    add_filter_flags,
    add_operation_commands,
    add_worker_operation_flags,
)
from taskboard.core.engine.settings import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_POLL_SECONDS,
    DEFAULT_POOL_SIZE,
    DEFAULT_RETRY_BASE_SECONDS,
    DEFAULT_RETRY_MAX_SECONDS,
    check_queue_name,
)
from taskboard.core.kinds.app_loading import add_app_argument
from taskboard.core.runtime.arguments import (
    OneLineParser,
    add_concurrency,
    add_version_flag,
    integer,
    number,
)
from taskboard.core.runtime.log_summary import DEFAULT_SUMMARY_SECONDS


def _job_id(text: str) -> int:
    value = integer(text)
    if not 0 < value < 2**63:
        raise argparse.ArgumentTypeError(f"job ids are positive integers, got {text}")
    return value


def _wait_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"--wait takes 0 to 86400 seconds, got {text}")
    return value


def _summary_seconds(text: str) -> float:
    value = number(text)
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"takes 0 to 86400 seconds, got {text}")
    return value


def _queue(text: str) -> str:
    try:
        return check_queue_name(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    """The argument parser (exposed for tests of argument handling).

    Flags are parsed as numbers here; their ranges are checked by `WorkerSettings` and
    `validate_job`, which say which bound was crossed. Queue names are checked here, so a
    line break or undecodable bytes in one never reach the worker or the database.
    """
    parser = OneLineParser(
        prog="taskboard",
        description="PostgreSQL job queue with fenced leases. Database: TASKBOARD_DATABASE_URL "
        "or DATABASE_URL; with neither, an embedded PostgreSQL under your data directory.",
    )
    add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    sub.add_parser("migrate", help="apply the schema (also done automatically on start)")

    p = sub.add_parser("enqueue", help="add a job")
    p.add_argument("kind", help="job kind: noop, sleep, email, billing, or one of --app's")
    add_app_argument(p)
    p.add_argument("--payload", default="{}", help="JSON object (default {})")
    p.add_argument("--run-at", type=_timestamp, help="ISO 8601 time with timezone")
    p.add_argument("--priority", type=integer, default=0, help="higher runs first (default 0)")
    p.add_argument(
        "--queue", type=_queue, default="default", help="queue name (default 'default')"
    )
    p.add_argument("--max-attempts", type=integer, default=None,
                   help="claims before dead (default: the kind's, else 5)")
    p.add_argument(
        "--timeout", type=number, default=None,
        help="seconds an attempt may run before its handler is stopped (default: the kind's)",
    )
    p.add_argument(
        "--key", default=None,
        help="unique key: while a job of this kind with this key is unfinished, enqueueing "
        "it again returns that job",
    )
    p.add_argument(
        "--after", type=_job_id, action="append", default=[], metavar="ID",
        help="run only once job ID has completed (repeatable: every one of them)",
    )

    p = sub.add_parser("worker", help="run a headless worker (structured logs on stderr)")
    add_app_argument(p)
    p.add_argument("--id", dest="worker_id", default=None, help="worker id (default host-pid)")
    p.add_argument(
        "--lease",
        type=number,
        default=DEFAULT_LEASE_SECONDS,
        help=f"lease seconds, 1 to 86400 (default {DEFAULT_LEASE_SECONDS:g})",
    )
    p.add_argument(
        "--renew-every",
        type=number,
        default=None,
        help="renewal interval seconds, 0.1 to half the lease (default lease/3)",
    )
    p.add_argument(
        "--pool-size",
        type=integer,
        default=DEFAULT_POOL_SIZE,
        help=f"connections, 3 to 1000 (default {DEFAULT_POOL_SIZE}); jobs of kinds that write to "
        "the database hold one each, at most size-2 at once",
    )
    add_concurrency(p)
    p.add_argument(
        "--queue",
        dest="queues",
        type=_queue,
        action="append",
        default=None,
        help="queue to work (repeatable; default 'default')",
    )
    p.add_argument(
        "--poll",
        type=number,
        default=DEFAULT_POLL_SECONDS,
        help=f"fallback poll seconds when no NOTIFY arrives (default {DEFAULT_POLL_SECONDS:g})",
    )
    p.add_argument(
        "--drain-timeout",
        type=number,
        default=DEFAULT_DRAIN_SECONDS,
        help="seconds to finish in-flight work on SIGINT/SIGTERM before releasing "
        f"(default {DEFAULT_DRAIN_SECONDS:g})",
    )
    p.add_argument(
        "--retry-base",
        type=number,
        default=DEFAULT_RETRY_BASE_SECONDS,
        help=f"first retry backoff seconds (default {DEFAULT_RETRY_BASE_SECONDS:g})",
    )
    p.add_argument(
        "--retry-max",
        type=number,
        default=DEFAULT_RETRY_MAX_SECONDS,
        help="longest retry backoff seconds, at most 7 days "
        f"(default {DEFAULT_RETRY_MAX_SECONDS:g})",
    )
    add_worker_operation_flags(p)
    p.add_argument("--log-format", choices=["json", "text"], default="json")
    p.add_argument(
        "--log-level", choices=["debug", "info", "warning"], default="info",
        help="info (default): starts, stops, reclaims, failures, lost leases, rejected "
        "completions, dead jobs, and a summary line; debug adds a line per claim and "
        "completion, renewals and pool stats",
    )
    p.add_argument(
        "--log-every-job", action="store_true",
        help="one line per claim and per completion at info, as well (a no-op job then "
        "costs the worker about 2.5x the CPU)",
    )
    p.add_argument(
        "--log-summary", type=_summary_seconds, default=DEFAULT_SUMMARY_SECONDS, metavar="S",
        help="seconds between summary lines (jobs claimed, completed, failed... since the "
        f"last; none when nothing happened), 0 = none (default {DEFAULT_SUMMARY_SECONDS:g})",
    )

    p = sub.add_parser("status", help="counts by state, workers, claims with seconds left")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser(
        "retry", help="make a dead or cancelled job pending again (one id, or by filter)"
    )
    p.add_argument("job_id", type=_job_id, nargs="?")
    add_filter_flags(p, "retry")
    p = sub.add_parser("cancel", help="cancel an unfinished job (one id, or by filter)")
    p.add_argument("job_id", type=_job_id, nargs="?")
    add_filter_flags(p, "cancel")
    p = sub.add_parser(
        "history", help="one job in full: payload (secrets masked), every claim, errors, charges"
    )
    p.add_argument("job_id", type=_job_id)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("result", help="what a completed job's handler returned (JSON)")
    p.add_argument("job_id", type=_job_id)
    p.add_argument("--wait", type=_wait_seconds, default=0.0, metavar="SECONDS",
                   help="wait up to SECONDS for the job to finish (default: do not wait)")
    p.add_argument("--json", action="store_true", help="the job id, state and result as JSON")
    p = sub.add_parser(
        "advise", help="per kind: renewal margins and stalls against the lease and the "
        "recovery time you accept, a verdict, and what sets the lease"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--recovery", type=number, default=60.0,
        help="seconds a crashed worker's job may wait before it runs again (default 60)",
    )
    add_app_argument(p)
    add_operation_commands(sub)
    return parser
