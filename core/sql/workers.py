"""The worker's own row, its sessions, and the requests operators send it."""

from __future__ import annotations

from typing import Final, LiteralString

LISTEN_JOBS: Final[LiteralString] = "LISTEN taskboard_jobs"
LISTEN_CONTROL: Final[LiteralString] = "LISTEN taskboard_control"
NOTIFY_CONTROL: Final[LiteralString] = "SELECT pg_notify('taskboard_control', %(worker)s)"

# Session settings of the connections a worker keeps for itself (the engine connection and
# the control connection; CONTROL_SESSION also for each use of a housekeeping connection),
# set when taken from the pool and reset before going back, so a handler never inherits
# them. Timeouts well under the renewal interval: a statement stuck
# on a lock or a slow server fails fast and the role retries, instead of holding up
# renewals. Generic plans on the engine connection: the grouped completion was re-planned
# on every call (custom plans, ~0.2 ms each, more than it takes to run). A generic plan is
# made once, from the statistics of that moment, and kept until ANALYZE replaces it: made
# on a young or empty table (a new install, a queue drained and pruned, then a burst) it
# was a sequential scan, and every claim and completion read the whole table until
# autovacuum came by (a steady 3,400 jobs/s from an empty table: a completion of 67 jobs
# took 12 ms, reading 34,000 rows; bench/results-2026-12-04-young-table.md has the
# latencies before and after). Every engine statement is meant to
# find its rows through an index at any size, so sequential scans are off for the session
# (still used where no index serves: the planner only counts them as disabled). So are
# bitmap scans: a plain index scan marks the dead entries it passes (claimed and finished
# jobs leave many in the ready and held indexes until vacuum), so the next scan skips
# them; a bitmap scan never does, and the idle wake-up's read of the held index visited
# every dead entry on each call (1 ms at a steady 3,400 jobs/s).
ENGINE_SESSION: Final[LiteralString] = """
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('enable_seqscan', 'off', false),
       set_config('enable_bitmapscan', 'off', false)
"""
CONTROL_SESSION: Final[LiteralString] = """
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false)
"""
# Which server process answers: a worker compares them at start to tell a session pooler
# (or none) from a transaction pooler (core/engine/pooler.py).
BACKEND_PID: Final[LiteralString] = "SELECT pg_backend_pid()"
# Whether this session refuses writes (a demoted primary, default_transaction_read_only).
SESSION_READ_ONLY: Final[LiteralString] = "SELECT current_setting('transaction_read_only')"
# After a failed autocommit pipeline: forget prepared statements on both sides (psycopg
# clears its own records when it sees this command tag; see base/pipelines.py).
DEALLOCATE_ALL: Final[LiteralString] = "DEALLOCATE ALL"
# Several statements in one string, sent without parameters (the simple protocol).
SESSION_RESET: Final[LiteralString] = (
    "RESET statement_timeout; RESET lock_timeout; RESET plan_cache_mode; RESET enable_seqscan;"
    " RESET enable_bitmapscan; UNLISTEN *"
)

REGISTER_WORKER: Final[LiteralString] = """
INSERT INTO taskboard_workers
       (id, host, pid, queues, kinds, lease_seconds, capacity, pool_max)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(kinds)s, %(lease)s, %(capacity)s, %(pool_max)s)
ON CONFLICT (id) DO UPDATE
   SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
       kinds = excluded.kinds, lease_seconds = excluded.lease_seconds,
       capacity = excluded.capacity, pool_max = excluded.pool_max, started_at = now(),
       heartbeat_at = now(), stopped_at = NULL, state = 'running', pause_requested = false,
       drain_requested = false, in_flight = 0, renewals_ok = 0, renewals_failed = 0,
       last_error = NULL, last_error_at = NULL
"""

HEARTBEAT: Final[LiteralString] = """
UPDATE taskboard_workers
   SET heartbeat_at = now(), state = %(state)s, in_flight = %(in_flight)s,
       renewals_ok = %(renewals_ok)s, renewals_failed = %(renewals_failed)s,
       pool_max = %(pool_max)s, pool_in_use = %(pool_in_use)s, pool_idle = %(pool_idle)s,
       pool_waiting = %(pool_waiting)s,
       last_error = coalesce(%(last_error)s, last_error),
       last_error_at = CASE WHEN %(last_error)s IS NULL THEN last_error_at ELSE now() END
 WHERE id = %(id)s
RETURNING pause_requested, drain_requested
"""

WORKER_STOPPED: Final[LiteralString] = """
UPDATE taskboard_workers
   SET state = 'stopped', stopped_at = now(), heartbeat_at = now(), in_flight = 0,
       pool_in_use = 0, pool_idle = 0, pool_waiting = 0,
       last_error = coalesce(%(last_error)s, last_error),
       last_error_at = CASE WHEN %(last_error)s IS NULL THEN last_error_at ELSE now() END
 WHERE id = %(id)s
"""

REQUEST_PAUSE: Final[LiteralString] = """
UPDATE taskboard_workers SET pause_requested = %(pause)s
 WHERE id = %(id)s AND stopped_at IS NULL
RETURNING state
"""

REQUEST_DRAIN: Final[LiteralString] = """
UPDATE taskboard_workers SET drain_requested = true
 WHERE id = %(id)s AND stopped_at IS NULL
RETURNING state
"""

# How many more connections the server accepts for an ordinary role right now: a worker
# checks its pool size against this before opening the pool, instead of filling every
# free slot and then failing.
FREE_CONNECTION_SLOTS: Final[LiteralString] = """
SELECT current_setting('max_connections')::int
       - current_setting('superuser_reserved_connections')::int
       - coalesce(current_setting('reserved_connections', true)::int, 0)
       - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
       current_setting('max_connections')::int
"""
