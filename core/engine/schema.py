"""The schema, versioned: `migrations/NNNN_name.sql`, applied in order under an advisory lock
so concurrent starts are safe."""

from __future__ import annotations

from importlib import resources
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.base.errors import SchemaTooNew


def _load_migrations() -> tuple[str, ...]:
    folder = resources.files("taskboard.core.engine").joinpath("migrations")
    files = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".sql")),
        key=lambda entry: entry.name,
    )
    numbers = [int(entry.name.split("_", 1)[0]) for entry in files]
    if numbers != list(range(1, len(files) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {numbers}")
    return tuple(entry.read_text(encoding="utf-8") for entry in files)


MIGRATIONS: tuple[str, ...] = _load_migrations()
SCHEMA_VERSION = len(MIGRATIONS)


def _too_new(current: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"database schema is version {current}, newer than this Taskboard "
        f"understands ({SCHEMA_VERSION}); upgrade Taskboard"
    )


async def migrate(conn: AsyncConnection[Any]) -> int:
    """Apply pending migrations; returns the schema version. Safe to run concurrently.

    Raises `SchemaTooNew` if the database was migrated by a newer Taskboard, so an old
    worker never runs fenced SQL against columns it does not know.
    """
    # Up to date: nothing to do, and no DDL privilege needed (workers may run under a
    # least-privileged role that cannot CREATE anything).
    current = await schema_version(conn)
    if current > SCHEMA_VERSION:
        raise _too_new(current)
    if current == SCHEMA_VERSION:
        return current
    async with conn.transaction():
        await conn.execute(sql.MIGRATION_LOCK)
        await conn.execute(sql.CREATE_SCHEMA_TABLE)
        cur = await conn.execute(sql.SCHEMA_VERSION)
        row = await cur.fetchone()
        current = int(row[0]) if row else 0
        if current > SCHEMA_VERSION:
            raise _too_new(current)
        for version in range(current + 1, SCHEMA_VERSION + 1):
            # Bytes, not str: a migration is several statements, which psycopg sends
            # as one simple query only when it is not given as a (parameterisable) str.
            await conn.execute(MIGRATIONS[version - 1].encode())
            await conn.execute(sql.RECORD_MIGRATION, {"v": version})
    return SCHEMA_VERSION


async def schema_version(conn: AsyncConnection[Any]) -> int:
    """The applied schema version, 0 when Taskboard's tables do not exist yet."""
    cur = await conn.execute(sql.SCHEMA_TABLE_EXISTS)
    row = await cur.fetchone()
    if not row or not row[0]:
        return 0
    cur = await conn.execute(sql.SCHEMA_VERSION)
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def installation_id(conn: AsyncConnection[Any]) -> UUID:
    """The random id of this installation (made by the first migrate), part of every
    Stripe Idempotency-Key so two databases sharing an account never replay each other."""
    cur = await conn.execute(sql.INSTALLATION_ID)
    row = await cur.fetchone()
    if row is None:
        raise RuntimeError("taskboard_installation is empty: run `taskboard migrate`")
    return UUID(str(row[0]))
