"""What the fault run deleted: a copy of every row removed from the tables the checker reads.

The operator prunes with a short retention while the run goes on, so a finished job (its
attempts, its effect records) may be gone by the time the checker looks. A trigger the
harness installs copies each deleted row, as JSON, into `taskboard_fault_deleted`; the
checker reads those copies as the rows' last state. A job deleted while it was not finished
(a prune racing a retry) is then visible as exactly that, instead of as "missing".

The trigger function names its table with the schema: the prune runs as a SECURITY DEFINER
function whose `search_path` holds only pg_catalog.
"""

from __future__ import annotations

from typing import Any, LiteralString

import psycopg
from psycopg import sql

ARCHIVE_TABLE = "taskboard_fault_deleted"
ARCHIVED_TABLES = (
    "taskboard_jobs",
    "taskboard_attempts",
    "taskboard_billing_charges",
    "taskboard_email_sends",  # written by the effect-record work; may not exist yet
)
ARCHIVE_SETUP: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS public.taskboard_fault_deleted (
         tbl text NOT NULL, row jsonb NOT NULL,
         deleted_at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    """CREATE OR REPLACE FUNCTION public.taskboard_fault_keep_deleted() RETURNS trigger
       LANGUAGE plpgsql AS $$
       BEGIN
         INSERT INTO public.taskboard_fault_deleted (tbl, row)
              VALUES (TG_TABLE_NAME, pg_catalog.to_jsonb(OLD));
         RETURN OLD;
       END $$""",
)


async def table_exists(conn: psycopg.AsyncConnection[Any], table: str) -> bool:
    """True when `table` exists in the connection's search path."""
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def install_archive(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """The archive table and a delete trigger on each table that exists; their names."""
    for statement in ARCHIVE_SETUP:
        await conn.execute(statement.encode())
    watched = []
    for table in ARCHIVED_TABLES:
        if not await table_exists(conn, table):
            continue
        name = sql.Identifier(table)
        await conn.execute(
            sql.SQL("DROP TRIGGER IF EXISTS taskboard_fault_keep_deleted ON {}").format(name)
        )
        await conn.execute(
            sql.SQL(
                "CREATE TRIGGER taskboard_fault_keep_deleted AFTER DELETE ON {} FOR EACH ROW"
                " EXECUTE FUNCTION public.taskboard_fault_keep_deleted()"
            ).format(name)
        )
        watched.append(table)
    return watched


async def archived_rows(
    conn: psycopg.AsyncConnection[Any], table: str, columns: LiteralString
) -> list[tuple[Any, ...]]:
    """`columns` (SQL over `r`, a row of the table) of its deleted rows, each followed
    by when it was deleted; empty when nothing was archived (no harness installed it)."""
    if not await table_exists(conn, ARCHIVE_TABLE) or not await table_exists(conn, table):
        return []
    query = sql.SQL(
        "SELECT {columns}, d.deleted_at FROM {archive} d,"
        " LATERAL jsonb_populate_record(NULL::{table}, d.row) r WHERE d.tbl = {name}"
    ).format(
        columns=sql.SQL(columns),
        archive=sql.Identifier(ARCHIVE_TABLE),
        table=sql.Identifier(table),
        name=sql.Literal(table),
    )
    cur = await conn.execute(query)
    return await cur.fetchall()
