"""Refusing to run a worker behind a transaction pooler (PgBouncer `pool_mode = transaction`
or `statement`), at start, with a message that names the fix.

Why refuse rather than run: a worker keeps session state on the two connections it holds
for its life (connection.py): statement and lock timeouts set once per session (a frozen
lock must fail a renewal fast), LISTEN on the control connection (enqueue wake-ups, and
cancels that stop a running handler), and psycopg's server-side prepared statements. Behind
a transaction pooler each transaction may run on another server connection: the timeouts
would be missing on some statements and left behind for other clients on others, LISTEN
would hear nothing (or on a server connection another client now uses), and a statement
prepared on one server connection is unknown on the next. PgBouncer 1.18 (Debian 12) has no
`max_prepared_statements` (1.21+), which would cover only the last of these. The lease
fence itself is plain SQL and would hold, so nothing would run twice unnoticed; but the
worker would lose its timeouts, its prompt cancel and its wake-ups, silently. Session
mode, or a direct connection, keeps all of them.

How it is detected: by which server process answers (`pg_backend_pid()`), not by a session
marker read back. A marker set on one transaction is read back unchanged whenever the
pooler hands the client the same server connection again, which PgBouncer does by default
(it reuses server connections last-in first-out), so on an idle pool a transaction pooler
looks exactly like a session pooler. What only a transaction pooler does is give a
client's server connection to another client between the first one's transactions. So a
second connection opens a transaction while the first is idle: behind PgBouncer's LIFO it
is handed the first one's server connection (seen at once); behind round robin one of the
two connections meets another server process on its next transaction. A session pooler
and a direct connection can do neither. Three rounds, so other clients' traffic taking
and returning server connections during the probe is unlikely to hide it; it is a guard
at start, not a proof, and the README says which pool mode workers need.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.base import libpq_settings
from taskboard.core.base.errors import ConfigError, DatabaseNotAnswering, DatabaseUnavailable
from taskboard.core.base.secrets import scrub
from taskboard.core.engine.connection import AnswerGuard
from taskboard.core.engine.db_errors import AnswerTimeout, describe

PROBE_ROUNDS = 3
PROBE_SECONDS = 10.0

TRANSACTION_POOLING = (
    "the database URL goes through a connection pooler in transaction or statement mode "
    "(PgBouncer pool_mode = transaction), but a worker needs its own sessions (timeouts, "
    "LISTEN for wake-ups and cancels, prepared statements): give workers a pooler in "
    "pool_mode = session, or connect them to PostgreSQL directly"
)


async def refuse_transaction_pooling(
    conn: AsyncConnection[Any], url: str, who: str | None = None
) -> None:
    """Raise `ConfigError` (one line, prefixed by `who`) if `conn`, an autocommit connection
    to `url`, goes through a transaction or statement pooler; return if it is direct or
    through a session pooler. Opens one more connection to `url` for the probe, with
    Taskboard's connection settings where `url` has none (core/base/libpq_settings.py)."""
    prefix = f"{who}: " if who else ""
    try:
        other = await AsyncConnection.connect(libpq_settings.with_defaults(url), autocommit=True)
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"{prefix}cannot connect ({scrub(describe(exc))})") from None
    current = conn
    try:
        async with other, AnswerGuard(lambda: current, PROBE_SECONDS, "pooler probe"):
            for _ in range(PROBE_ROUNDS):
                mine = await _pid(conn)
                async with other.transaction():
                    current = other
                    theirs = await _pid(other)
                    current = conn
                    mine_again = await _pid(conn)
                current = other
                theirs_again = await _pid(other)
                current = conn
                if theirs == mine or mine_again != mine or theirs_again != theirs:
                    raise ConfigError(prefix + TRANSACTION_POOLING)
    except psycopg.errors.ProtocolViolation as exc:
        # PgBouncer in statement mode refuses the probe's transaction outright.
        if "pooling mode" in str(exc):
            raise ConfigError(prefix + TRANSACTION_POOLING) from None
        raise
    except AnswerTimeout as exc:
        raise DatabaseNotAnswering(
            f"{prefix}{exc} (behind a pooler: is its pool for this database full?)"
        ) from None


async def _pid(conn: AsyncConnection[Any]) -> int:
    cur = await conn.execute(sql.BACKEND_PID)
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])
