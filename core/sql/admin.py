"""The schema's own bookkeeping, the installation id and the stand-ins' registry."""

from __future__ import annotations

from typing import Final, LiteralString

# --- schema ------------------------------------------------------------------------------

SCHEMA_TABLE_EXISTS: Final[LiteralString] = "SELECT to_regclass('taskboard_schema') IS NOT NULL"
SCHEMA_VERSION: Final[LiteralString] = "SELECT coalesce(max(version), 0) FROM taskboard_schema"
CREATE_SCHEMA_TABLE: Final[LiteralString] = """
CREATE TABLE IF NOT EXISTS taskboard_schema (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
RECORD_MIGRATION: Final[LiteralString] = "INSERT INTO taskboard_schema (version) VALUES (%(v)s)"
# Any constant works as long as every Taskboard process agrees on it; it only serialises
# migrations, so two workers starting at once do not both try to create the tables.
MIGRATION_LOCK: Final[LiteralString] = "SELECT pg_advisory_xact_lock(8816834908828729345)"

# --- installation ------------------------------------------------------------------------

INSTALLATION_ID: Final[LiteralString] = "SELECT id FROM taskboard_installation"

# --- stand-ins (embedded default) --------------------------------------------------------

# Serialises "look up, probe, start our own, register" across processes, so two processes
# starting at once do not both start a stand-in and split the host in two. Advisory locks
# need no grant. Any constant works as long as every Taskboard process agrees on it.
STANDINS_LOCK: Final[LiteralString] = "SELECT pg_advisory_lock(3820370106872125153)"
# A process holds the lock for a probe (at most ~0.5 s per stand-in) and a server start; a
# longer wait means something is stuck, and an unshared stand-in beats a hung start.
STANDINS_LOCK_TIMEOUT: Final[LiteralString] = "SET lock_timeout = '5s'"

FIND_STANDIN: Final[LiteralString] = """
SELECT address, pid FROM taskboard_standins WHERE name = %(name)s AND host = %(host)s
"""
# Last writer wins: a process that found the registered stand-in dead starts its own.
REGISTER_STANDIN: Final[LiteralString] = """
INSERT INTO taskboard_standins (name, host, address, pid)
VALUES (%(name)s, %(host)s, %(address)s, %(pid)s)
ON CONFLICT (name, host) DO UPDATE
   SET address = excluded.address, pid = excluded.pid, registered_at = now()
"""
FORGET_STANDIN: Final[LiteralString] = """
DELETE FROM taskboard_standins
 WHERE name = %(name)s AND host = %(host)s AND address = %(address)s
"""

# --- billing -----------------------------------------------------------------------------

# The billing handler's record of a charge is written on its own: see `sql.effects`.

# The demo starting again, in its own database only (`Fleet.reset_demo` refuses otherwise).
# DELETE, not TRUNCATE: the counting triggers see the rows go, so the kept counts stay
# right; and job ids go on from where they were (effects are keyed by each job's random
# identity anyway, so no idempotency key or Message-ID is ever reused).
# Several statements without parameters: one implicit transaction (the simple protocol).
DEMO_RESET: Final[LiteralString] = (
    "DELETE FROM taskboard_attempts; DELETE FROM taskboard_billing_charges; "
    "DELETE FROM taskboard_email_sends; "
    "DELETE FROM taskboard_jobs; DELETE FROM taskboard_workers; "
    "DELETE FROM taskboard_queues; DELETE FROM taskboard_schedules"
)

DATABASE_EXISTS: Final[LiteralString] = "SELECT 1 FROM pg_database WHERE datname = %(name)s"
# A constant name: nothing user-given is ever formatted into SQL.
CREATE_DEMO_DATABASE: Final[LiteralString] = "CREATE DATABASE taskboard_demo"
# A browser session's own demo database (`taskboard-tui --serve --demo`). The name is made
# by `core.fleet.rooms` from a checked pattern and goes into `{}` as a psycopg.sql
# Identifier (quoted), never as text.
CREATE_ROOM_DATABASE: Final[LiteralString] = "CREATE DATABASE {}"
DROP_ROOM_DATABASE: Final[LiteralString] = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
