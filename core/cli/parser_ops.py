"""Flags of the operator commands: `prune`, `schedule`, `queue`, and the duration type
(`90s`, `30m`, `12h`, `7d`, or plain seconds) they and `worker` share."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from taskboard.core.base.errors import ConfigError
from taskboard.core.base.names import check_queue_name
from taskboard.core.base.secrets import first_unprintable
from taskboard.core.engine.settings import DEFAULT_MAX_SNOOZES, MAX_SNOOZES_LIMIT
from taskboard.core.kinds.app_loading import add_app_argument
from taskboard.core.operations.job_bulk import CANCEL_STATES, RETRY_STATES
from taskboard.core.operations.job_bulk import DEFAULT_BATCH as BULK_BATCH
from taskboard.core.operations.job_bulk import MAX_BATCH as MAX_BULK_BATCH
from taskboard.core.operations.retention import DEFAULT_BATCH
from taskboard.core.runtime.arguments import OneLineParser, integer, number

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)", re.ASCII)
_UNIT_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
MAX_DURATION_SECONDS = 10 * 365 * 86_400.0
MAX_REASON_CHARS = 500
# `taskboard.core.runtime.metrics.DEFAULT_HOST`, not imported: prometheus_client would cost every
# command a tenth of a second (tests/test_metrics.py checks they agree).
DEFAULT_HOST = "127.0.0.1"


def duration(text: str) -> float:
    """Seconds from `90s`, `30m`, `12h`, `7d` or a plain number of seconds (0 to 10 years)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (e.g. 90s, 30m, 12h, 7d)"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds) or seconds > MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(f"duration {text!r} is longer than 10 years")
    return seconds


def queue_name(text: str) -> str:
    """A queue name, checked before anything connects."""
    try:
        return check_queue_name(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _reason(text: str) -> str:
    if len(text) > MAX_REASON_CHARS:
        raise argparse.ArgumentTypeError(f"reason is longer than {MAX_REASON_CHARS} characters")
    bad = first_unprintable(text)
    if bad is not None or "\x00" in text:
        raise argparse.ArgumentTypeError("reason holds a line break or control character")
    return text


def _port(text: str) -> int:
    value = integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"ports are 0 to 65535, got {text}")
    return value


def add_worker_operation_flags(p: argparse.ArgumentParser) -> None:
    """`worker`'s flags for burst mode, retention and metrics."""
    p.add_argument(
        "--burst",
        action="store_true",
        help="process until nothing is ready, then drain and exit 0; exit 5 if the "
        "database is unreachable for a lease",
    )
    p.add_argument("--keep-completed", type=duration, default=None,
                   help="prune completed jobs older than this (default 1d)")
    p.add_argument("--keep-dead", type=duration, default=None,
                   help="prune dead jobs older than this (default 7d)")
    p.add_argument("--keep-cancelled", type=duration, default=None,
                   help="prune cancelled jobs older than this (default 7d)")
    p.add_argument("--prune-every", type=number, default=None,
                   help="seconds between the fleet's pruning runs, 0 = never (default 60)")
    p.add_argument("--max-snoozes", type=integer, default=None,
                   help=f"snoozes per job; the one past it makes the job dead with the "
                   f"reason (0 to {MAX_SNOOZES_LIMIT}, default {DEFAULT_MAX_SNOOZES})")
    p.add_argument("--metrics-port", type=_port, default=None,
                   help="serve Prometheus metrics on this port (0: any free port, logged)")
    p.add_argument("--metrics-host", default=DEFAULT_HOST,
                   help=f"address to serve metrics on (default {DEFAULT_HOST}: this host "
                   "only; another address exposes them to the network)")


def add_operation_commands(sub: Any) -> None:
    """`prune`, `health`, `schedule add|list|remove`, `queue pause|resume|list`."""
    p = sub.add_parser("prune", help="delete finished jobs past their age (billing records stay)")
    p.add_argument("--older-than", type=duration, default=None,
                   help="one age for completed, dead and cancelled jobs, e.g. 12h or 7d "
                   "(default: completed 1d, dead and cancelled 7d)")
    p.add_argument("--batch", type=integer, default=DEFAULT_BATCH,
                   help=f"jobs deleted per transaction, 1 to 100000 (default {DEFAULT_BATCH})")

    p = sub.add_parser(
        "health", help="can PostgreSQL clean up after the queue: dead rows, the oldest "
        "snapshot, slots, claim time; amber/red and what to do"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--window", type=number, default=2.0,
                   help="seconds over which to measure the claim time, 0 to 60 "
                   "(with pg_stat_statements; default 2)")

    p = sub.add_parser("schedule", help="periodic jobs: add, list, remove")
    ops = p.add_subparsers(
        dest="action", required=True, parser_class=OneLineParser, metavar="{add,list,remove}"
    )
    s = ops.add_parser(
        "add", help="create or replace a schedule (and enable it again if it was disabled)"
    )
    s.add_argument("name", help="1-100 letters, digits or . _ : -")
    s.add_argument("--cron", required=True,
                   help="cron expression, e.g. '*/5 * * * *', read in UTC (or --tz); a 6th "
                   "field is seconds ('0 3 * * * 30' is 03:00:30); an expression with no "
                   "time within 5 years (e.g. '0 0 31 2 *') is refused")
    s.add_argument("--tz", default="UTC",
                   help="IANA zone to read --cron in (default UTC, whatever the database "
                   "session's zone). Daylight saving: a skipped wall time fires at the jump, "
                   "a repeated one fires once, at its first occurrence")
    s.add_argument("kind", help="job kind to enqueue at every slot")
    add_app_argument(s)
    s.add_argument("--payload", default="{}", help="JSON object (default {})")
    s.add_argument("--queue", type=queue_name, default="default",
                   help="queue name (default 'default')")
    s.add_argument("--priority", type=integer, default=0, help="higher runs first (default 0)")
    s.add_argument("--max-attempts", type=integer, default=None,
                   help="claims before dead (default: the kind's, else 5)")
    s.add_argument("--timeout", type=number, default=None,
                   help="seconds an attempt may run (default: the kind's)")
    s = ops.add_parser(
        "list", help="every schedule with its last slot and next run, or why it is disabled"
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s = ops.add_parser("remove", help="delete a schedule")
    s.add_argument("name")

    p = sub.add_parser("queue", help="pause and resume queues fleet-wide")
    ops = p.add_subparsers(
        dest="action", required=True, parser_class=OneLineParser, metavar="{pause,resume,list}"
    )
    s = ops.add_parser("pause", help="no worker claims from the queue until it is resumed")
    s.add_argument("queue", type=queue_name)
    s.add_argument("--reason", type=_reason, default=None, help="shown by status and list")
    s = ops.add_parser("resume", help="let workers claim from the queue again")
    s.add_argument("queue", type=queue_name)
    s = ops.add_parser("list", help="queues with jobs, and which are paused")
    s.add_argument("--json", action="store_true", help="machine-readable output")


def _error_text(text: str) -> str:
    if not text or len(text) > MAX_REASON_CHARS:
        raise argparse.ArgumentTypeError(f"--error takes 1 to {MAX_REASON_CHARS} characters")
    return text


def add_filter_flags(p: argparse.ArgumentParser, action: str) -> None:
    """`retry` and `cancel` by filter: which jobs, a dry run, the batch size."""
    states = RETRY_STATES if action == "retry" else CANCEL_STATES
    p.add_argument("--kind", default=None, help="only jobs of this kind")
    p.add_argument("--queue", type=queue_name, default=None, help="only jobs in this queue")
    p.add_argument("--state", choices=states, default=None,
                   help=f"only jobs in this state (default: {' or '.join(states)})")
    p.add_argument("--error", type=_error_text, default=None,
                   help="only jobs whose last error contains this text (any case)")
    p.add_argument("--since", type=duration, default=None,
                   help="only jobs that entered their state this recently, e.g. 1h "
                   "(unfinished jobs: were enqueued)")
    p.add_argument("--dry-run", action="store_true",
                   help="print how many jobs match and the first ids; change nothing")
    p.add_argument("--batch", type=integer, default=BULK_BATCH,
                   help=f"jobs per transaction, 1 to {MAX_BULK_BATCH} (default {BULK_BATCH})")
