"""`pipeline(conn)`: psycopg's pipeline, minus a false record of a prepared statement.

psycopg prepares a statement on its sixth run on a connection (`prepare_threshold`) and,
inside a pipeline, records it as prepared when it queues the Parse. If an earlier statement
of the pipeline fails, the server skips everything after it up to the Sync, that Parse
included, and nothing corrects the record (inside a transaction the ROLLBACK that follows
clears psycopg's records; an autocommit pipeline has none). Every later run of the statement
on that connection then fails with "prepared statement _pg3_N does not exist": a fault run
met this on a worker's engine connection, whose claims all failed until the worker called
itself unhealthy. So after a failed autocommit pipeline both sides forget their prepared
statements (`DEALLOCATE ALL`, whose command tag psycopg watches for and clears its own
records on), and they are prepared again as they are reused. It is the command psycopg sends
itself once a ROLLBACK has cleared its records, so a pooler that passes psycopg's own (PgBouncer
1.22 and later tracks it) passes this one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import AsyncConnection, pq
from taskboard.core import sql


@contextlib.asynccontextmanager
async def pipeline(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    """`conn.pipeline()`; if a statement in it fails on a connection left idle, the
    connection's prepared statements are deallocated before the error goes on."""
    try:
        async with conn.pipeline():
            yield
    except psycopg.Error:
        if not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            try:
                await conn.execute(sql.DEALLOCATE_ALL)
            except psycopg.Error:
                # Records that may be false stay only on a connection that cannot be used.
                conn.pgconn.finish()
        raise
