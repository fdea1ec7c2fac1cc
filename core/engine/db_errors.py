"""Which database errors a worker waits out, and how to name one in a log line.

Transient: the database is not answering right now, or refused for a moment (a connection
cut, a restart, a read-only server, our own statement or lock timeout, a deadlock, too many
connections). The role retries them with backoff for as long as they last; they say nothing
about who owns a job. Anything else is unexpected: the supervisor logs it, backs off and
restarts the role, and if it persists the worker says it is unhealthy.

Read-only is transient with a difference: waiting does not end it. A session that turned
read-only (a demoted primary keeps its connections; `default_transaction_read_only` was
switched on) stays read-only, so the connection that met it is closed and the pool is
refilled through the URL (`read_only.LeavingPool`), where `target_session_attrs=read-write`
finds the new primary; and if no writable server is found within a lease the supervisor
calls the worker unhealthy.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg
from psycopg_pool import PoolTimeout

READ_ONLY = "25006"  # read_only_sql_transaction
LOST_PREPARED = "26000"  # invalid_sql_statement_name: see `lost_prepared`

# SQLSTATEs outside the connection classes that a healthy worker can meet and outlive.
_TRANSIENT_STATES = frozenset(
    {
        READ_ONLY,  # read_only_sql_transaction: retried, on another connection (see above)
        "57014",  # query_canceled: our statement_timeout
        "55P03",  # lock_not_available: our lock_timeout
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: the server is starting
        "53300",  # too_many_connections
    }
)


# A server that refuses a new session says why in a FATAL line (libpq gives no SQLSTATE for
# it). These reasons pass; any other (no such database or role, a wrong password, pg_hba)
# stays until someone changes the settings.
_PASSING_REFUSALS = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is not accepting connections",
    "too many clients",
    "remaining connection slots are reserved",
    "no more connections allowed",  # PgBouncer's max_client_conn
    "pgbouncer cannot connect to server",
)


def refused_for_good(message: str) -> bool:
    """True when a failed connection's message is a server's refusal that waiting does not
    end (no such database or role, authentication failed); refused, timed out or
    unreachable without such a word from a server is a state that may pass."""
    if "FATAL:" not in message:
        return False
    lowered = message.lower()
    return not any(reason in lowered for reason in _PASSING_REFUSALS)


class AnswerTimeout(TimeoutError):
    """The server did not answer within the worker's own limit (a frozen server never
    fires `statement_timeout`); the connection was dropped. `silent`: a statement went out
    on an open connection and got no answer (not a wait for a connection to be had)."""

    def __init__(self, message: str, *, silent: bool) -> None:
        super().__init__(message)
        self.silent = silent


def is_read_only(exc: BaseException) -> bool:
    """True when the server refused a write because the session is read-only: the
    connection must be left, not retried."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == READ_ONLY


def lost_prepared(exc: BaseException) -> bool:
    """True when the server does not know a statement psycopg recorded as prepared on this
    connection: the record is false (see `base.pipelines`) and stays false, so the
    connection must be left, not retried."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == LOST_PREPARED


def is_transient(exc: BaseException) -> bool:
    """True for errors a worker should wait out rather than report as a fault."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | PoolTimeout):
        return True
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        return state in _TRANSIENT_STATES or state.startswith(("08", "53"))
    return False


@contextlib.asynccontextmanager
async def named(statement: str) -> AsyncIterator[None]:
    """Name `statement` in the notes of any database error raised inside, so a log line
    says which statement failed."""
    try:
        yield
    except psycopg.Error as exc:
        exc.add_note(f"statement: {statement}")
        raise


def statement_of(exc: BaseException) -> str | None:
    """The statement named in the exception's notes (see `named`), if any."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, str) and note.startswith("statement: "):
            return note.removeprefix("statement: ")
    return None


def describe(exc: BaseException) -> str:
    """`Class: first line of the message`, short enough for a log field or a worker row."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    name = type(exc).__name__
    return f"{name}: {line}"[:300] if line else name
