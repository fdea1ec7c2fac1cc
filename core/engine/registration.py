"""A worker's row in `taskboard_workers`: registering at start, the stop at the end, and the
checks before the pool is opened (room for it on the server, no transaction pooler).

Every statement here has an answer limit (`WorkerSettings.startup_answer_timeout`): a
connection that goes silent before the engine runs (a flow a NAT or proxy forgot, whose
packets are still acknowledged, so keepalives do not notice) is closed and the next try
opens another, instead of a worker that waits on it for ever before it starts."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any
from uuid import UUID

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core import sql
from taskboard.core.base.errors import ConfigError, DatabaseUnavailable
from taskboard.core.base.secrets import scrub
from taskboard.core.engine import limits, schema
from taskboard.core.engine.connection import answered
from taskboard.core.engine.db_errors import AnswerTimeout, describe, is_transient
from taskboard.core.engine.pooler import refuse_transaction_pooling
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker_parts import WorkerParts
from taskboard.core.engine.worker_pool import worker_conninfo

log = logging.getLogger("taskboard.worker")

STOP_RECORD_SECONDS = 2.0
FIRST_RETRY_SECONDS = 0.2


async def free_connection_slots(conn: AsyncConnection[Any]) -> tuple[int, int]:
    """(connections the server accepts now, counting the asking one; max_connections)."""
    cur = await conn.execute(sql.FREE_CONNECTION_SLOTS)
    row = await cur.fetchone()
    assert row is not None
    # The asking connection is closed again before anything opens: it counts as free.
    return int(row[0]) + 1, int(row[1])


async def check_connection_budget(conn: AsyncConnection[Any], pool_size: int) -> None:
    """Refuse a pool larger than the server's free connection slots, before opening it."""
    free, total = await free_connection_slots(conn)
    if pool_size > free:
        raise ConfigError(
            f"pool size {pool_size} is more than the {free} connections the server has "
            f"free (max_connections {total}); lower --pool-size or raise max_connections"
        )


async def check_before_pool(url: str, worker_id: str, settings: WorkerSettings) -> None:
    """Room for the pool on the server, and no transaction pooler in between. Started during
    a failover (old primary frozen, standby not yet promoted), "not now" is waited out for
    a lease from the first failure, as every role does, rather than exit 2 ("bad usage")."""
    loop = asyncio.get_running_loop()
    conninfo = worker_conninfo(url, worker_id)
    give_up: float | None = None
    delay = FIRST_RETRY_SECONDS
    while True:
        connected = False
        try:
            async with await AsyncConnection.connect(conninfo, autocommit=True) as conn:
                connected = True
                await answered(conn, check_connection_budget(conn, settings.pool_size),
                               settings.startup_answer_timeout, "room for the pool")
                await refuse_transaction_pooling(conn, conninfo, f"worker {worker_id}")
            return
        except (psycopg.Error, AnswerTimeout) as exc:
            now = loop.time()
            give_up = now + settings.lease_seconds if give_up is None else give_up
            if is_transient(exc) and now + delay <= give_up:
                log.warning("worker %s: cannot start yet (%s)", worker_id, scrub(describe(exc)))
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)
                continue
            if connected and not is_transient(exc):
                raise
            what = "no answer at start" if connected else "cannot connect"
            raise DatabaseUnavailable(
                f"worker {worker_id}: {what} ({scrub(describe(exc))})"
            ) from None


class Registration:
    """Writes the worker's row: registered (with its kinds and queues) and stopped."""

    def __init__(
        self, worker: WorkerParts, pool: AsyncConnectionPool[AsyncConnection[Any]]
    ) -> None:
        self._worker = worker
        self._pool = pool

    def _row(self) -> dict[str, Any]:
        worker = self._worker
        return {
            "id": worker.id,
            "host": worker.host,
            "pid": os.getpid(),
            "queues": list(worker.settings.queues),
            "kinds": worker.registry.runnable(),
            "lease": worker.settings.lease_seconds,
            "capacity": worker.settings.capacity,
            "pool_max": worker.settings.pool_size,
        }

    async def register(self) -> UUID:
        """Register (retrying while the database is unavailable); the installation id."""
        delay = FIRST_RETRY_SECONDS
        cap = self._worker.settings.retry_delay_cap
        while True:
            try:
                async with self._pool.connection() as conn:
                    return await answered(conn, self._register(conn),
                                          self._worker.settings.startup_answer_timeout,
                                          "registration")
            except Exception as exc:
                if not is_transient(exc):
                    raise
                log.warning(
                    "registration: %s",
                    describe(exc),
                    extra={"fields": {"msg": "database unavailable", "role": "registration",
                                      "worker": self._worker.id, "error": describe(exc),
                                      "action": "retrying"}},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, cap)

    async def _register(self, conn: AsyncConnection[Any]) -> UUID:
        await conn.execute(sql.REGISTER_WORKER, self._row())
        await limits.declare(conn, self._worker.registry)
        return await schema.installation_id(conn)

    async def stopped(self, last_error: str | None) -> None:
        """Mark the row stopped (best effort: the database may be why the worker stops)."""
        try:
            async with asyncio.timeout(STOP_RECORD_SECONDS):
                async with self._pool.connection() as conn:
                    await conn.execute(
                        sql.WORKER_STOPPED, {"id": self._worker.id, "last_error": last_error}
                    )
        except Exception as exc:
            log.warning(
                "could not mark worker %s stopped (%s)", self._worker.id, describe(exc)
            )
