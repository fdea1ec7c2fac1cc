"""Finding and connecting to the database, with one-line errors instead of tracebacks."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from taskboard.core import sql
from taskboard.core.base import libpq_settings, secrets
from taskboard.core.base.errors import ConfigError, DatabaseUnavailable
from taskboard.core.base.secrets import mask_dsn
from taskboard.core.engine.schema import migrate
from taskboard.core.runtime.embedded import EmbeddedPostgres

CONNECT_TIMEOUT_SECONDS = libpq_settings.CONNECT_TIMEOUT_SECONDS
DEMO_DATABASE = "taskboard_demo"


@dataclass
class Database:
    """Where Taskboard's database is: a configured URL, or the embedded server."""

    url: str
    embedded: EmbeddedPostgres | None = None

    @property
    def masked(self) -> str:
        """The URL with its password masked, safe to show or log."""
        return mask_dsn(self.url)

    @property
    def mode(self) -> str:
        """`embedded` or `attached`."""
        return "embedded" if self.embedded else "attached"

    def close(self) -> None:
        """Stop the embedded server if this process started it."""
        if self.embedded is not None:
            self.embedded.stop()


def database_url_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """`TASKBOARD_DATABASE_URL`, else `DATABASE_URL`, else None (use the embedded server)."""
    env = os.environ if env is None else env
    return env.get("TASKBOARD_DATABASE_URL") or env.get("DATABASE_URL") or None


def open_database(env: Mapping[str, str] | None = None) -> Database:
    """Use `TASKBOARD_DATABASE_URL`/`DATABASE_URL`, or start the embedded server.

    The URL's password is registered with `secrets` first, so no message Taskboard or a
    library prints from here on can carry it; a URL libpq cannot parse is refused here,
    before anything connects, retries or logs.
    """
    env = os.environ if env is None else env
    url = database_url_from_env(env)
    if url:
        name = "TASKBOARD_DATABASE_URL" if env.get("TASKBOARD_DATABASE_URL") else "DATABASE_URL"
        check_dsn(url, name)
        return Database(url)
    server = EmbeddedPostgres()
    return Database(server.start(), server)


def check_dsn(url: str, what: str = "the database URL") -> None:
    """Register the URL's password with `secrets`, and refuse a URL libpq cannot parse
    (`ConfigError`) with every token libpq quotes masked: any of them may be a piece of the
    password (`invalid percent-encoded token: "s3cr3t%PW"`, `missing "=" after "PW"`)."""
    secrets.register_dsn(url)
    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        reason = _first_line(exc, url)
        if secrets.has_password(url):
            reason = secrets.mask_quoted(reason)
        raise ConfigError(
            f"{what} is not a valid connection string: {reason} ({mask_dsn(url)})"
        ) from None


def conninfo(url: str, application_name: str | None = None) -> str:
    """`url` with Taskboard's connection settings (timeouts, keepalives, application_name;
    see `libpq_settings`) wherever the URL does not set them itself; `application_name`
    defaults to this process's (`libpq_settings.name_sessions`)."""
    check_dsn(url)
    return libpq_settings.with_defaults(url, application_name)


async def connect(
    url: str, *, application_name: str | None = None, **kwargs: Any
) -> AsyncConnection[Any]:
    """Open one autocommit connection with Taskboard's settings (`conninfo`); unreachable
    or refused becomes `DatabaseUnavailable` (a URL libpq cannot parse, `ConfigError`)."""
    full = conninfo(url, application_name)
    try:
        return await AsyncConnection.connect(full, autocommit=True, **kwargs)
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"cannot connect to {mask_dsn(url)}: {_first_line(exc, url)}"
        ) from None


@asynccontextmanager
async def connection(url: str) -> AsyncIterator[AsyncConnection[Any]]:
    """An autocommit connection for the duration of the block, without server-side
    prepared statements: behind a transaction pooler that does not track them (PgBouncer
    before 1.21, or with `max_prepared_statements = 0`) a statement psycopg prepared on one
    server connection is unknown on the next (`taskboard prune`'s
    batches met "prepared statement _pg3_0 does not exist"); a one-shot command gains
    nothing from them."""
    conn = await connect(url, prepare_threshold=None)
    try:
        yield conn
    finally:
        await conn.close()


async def ensure_schema(url: str) -> int:
    """Connect and apply pending migrations; returns the schema version."""
    async with connection(url) as conn:
        return await migrate(conn)


async def demo_database(db: Database) -> Database:
    """The training demo's own database on the same server, created when missing, so the
    story never meets the workers, jobs and failures of real runs (and can be emptied to
    start again). The returned `Database` shares the server; close only `db`."""
    if conninfo_to_dict(db.url).get("dbname") == DEMO_DATABASE:
        return db
    async with connection(db.url) as conn:
        cur = await conn.execute(sql.DATABASE_EXISTS, {"name": DEMO_DATABASE})
        if await cur.fetchone() is None:
            try:
                await conn.execute(sql.CREATE_DEMO_DATABASE)
            except psycopg.errors.DuplicateDatabase:
                pass  # another dashboard created it a moment ago
            except psycopg.Error as exc:
                raise ConfigError(
                    f"the demo runs in its own database, and {DEMO_DATABASE} could not be "
                    f"created on {db.masked}: {_first_line(exc, db.url)}; create it "
                    f"(CREATE DATABASE {DEMO_DATABASE}) or run the demo on the embedded server"
                ) from None
    return Database(make_conninfo(db.url, dbname=DEMO_DATABASE), db.embedded)


def _first_line(exc: BaseException, url: str) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # libpq echoes parts of the conninfo in some messages (the token it could not decode,
    # a word it took for a keyword, a host name); never let a password through.
    secrets.register_dsn(url)
    return secrets.mask_text(text.replace(url, mask_dsn(url)))
