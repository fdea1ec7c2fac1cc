"""Queue health: what PostgreSQL says about Taskboard's tables and the xmin horizon."""

from __future__ import annotations

from typing import Final, LiteralString

# Dead and live row versions and the last vacuums of Taskboard's tables in the schema the
# connection uses (the statistics collector's counts: estimates, a second or so behind).
TABLE_HEALTH: Final[LiteralString] = """
SELECT relname, n_live_tup, n_dead_tup, greatest(last_autovacuum, last_vacuum) AS vacuumed,
       last_autovacuum
  FROM pg_stat_user_tables
 WHERE relname LIKE 'taskboard\\_%%' AND schemaname = current_schema()
 ORDER BY n_dead_tup DESC, relname
"""

# The session whose snapshot is oldest (it decides the horizon vacuum may clean up to),
# this one excepted. Its query text is never read: it may hold anyone's data or secrets.
# `visible` is false when this role may not see other roles' sessions in full.
OLDEST_XMIN_HOLDER: Final[LiteralString] = """
SELECT pid, coalesce(nullif(application_name, ''), '(no application name)') AS application,
       usename AS role, state, xact_start, query_start, age(backend_xmin) AS xid_age,
       extract(epoch FROM clock_timestamp() - xact_start)::float8 AS open_seconds,
       datname AS database
  FROM pg_stat_activity
 WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
 ORDER BY age(backend_xmin) DESC, xact_start
 LIMIT 1
"""

SEES_ALL_SESSIONS: Final[LiteralString] = """
SELECT rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')
  FROM pg_roles WHERE rolname = current_user
"""

# Prepared transactions hold the horizon too, and outlive their session.
OLDEST_PREPARED: Final[LiteralString] = """
SELECT gid, prepared, age(transaction) AS xid_age,
       extract(epoch FROM clock_timestamp() - prepared)::float8 AS open_seconds
  FROM pg_prepared_xacts ORDER BY age(transaction) DESC LIMIT 1
"""

# Replication slots whose xmin (or catalog xmin) keeps old row versions for a consumer.
SLOTS_HOLDING: Final[LiteralString] = """
SELECT slot_name, slot_type, active,
       greatest(age(xmin), age(catalog_xmin)) AS xid_age
  FROM pg_replication_slots
 WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
 ORDER BY greatest(age(xmin), age(catalog_xmin)) DESC
"""

STATEMENTS_INSTALLED: Final[LiteralString] = """
SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'pg_stat_statements'
"""

# The claim statements (every variant: they share the CTE `fresh` and SKIP LOCKED), summed.
# The caller reads it twice and divides the differences: a mean since the last reset would
# hide today's slowdown behind months of fast claims.
CLAIM_TIMING: Final[LiteralString] = """
SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)::float8
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query LIKE '%%WITH fresh AS%%' AND query LIKE '%%FOR NO KEY UPDATE SKIP LOCKED%%'
"""
