"""What `taskboard status` prints."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from taskboard.core.base.secrets import one_line
from taskboard.core.cli.operations import print_schedules, schedule_rows
from taskboard.core.engine.schema import SCHEMA_VERSION
from taskboard.core.operations.queues import paused_queues
from taskboard.core.operations.schedules import list_schedules
from taskboard.core.runtime.db import Database
from taskboard.core.view.no_worker import no_worker_lines
from taskboard.core.view.status import read_board

EXIT_OK = 0


async def status(conn: Any, db: Database, as_json: bool) -> int:
    board = await read_board(conn, database=db.masked, mode=db.mode, claims_limit=1000)
    now = board.db_now
    # Both read small tables (paused queues, schedules): status stays fast however many
    # finished rows there are.
    paused = await paused_queues(conn)
    schedules = schedule_rows(await list_schedules(conn), now)
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
            "no_worker": [
                {"kind": o.kind, "queue": o.queue, "waiting": o.waiting,
                 "queue_worked": o.queue_worked}
                for o in board.orphans
            ],
            "paused_queues": [
                {"name": q.name, "paused_at": q.paused_at.isoformat(), "reason": q.reason,
                 "waiting": q.waiting}
                for q in paused
            ],
            "schedules": [
                {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
                for row in schedules
            ],
            "kind_limits": [
                {"kind": lim.kind, "max_running": lim.max_running,
                 "rate_per_second": lim.rate_per_second, "running": lim.running,
                 "waiting": lim.waiting}
                for lim in board.limits
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
    for line in no_worker_lines(board.orphans):
        print(f"warning: {line}")
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
    print(f"paused queues ({len(paused)}):")
    for q in paused:
        reason = f" ({one_line(q.reason)})" if q.reason else ""
        print(f"  {q.name:<24} since {q.paused_at:%Y-%m-%d %H:%M:%S %Z}{reason}  "
              f"{q.waiting} waiting")
    print(f"schedules ({len(schedules)}):")
    if schedules:
        print_schedules(schedules, indent="  ")
    print(f"kind limits ({len(board.limits)}):")
    for lim in board.limits:
        print(f"  {lim.summary}")
    return EXIT_OK
