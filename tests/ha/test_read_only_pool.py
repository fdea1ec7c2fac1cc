"""The worker's pool leaves a server whose sessions turned read-only: after one refused
write, the next connection it hands out is on the writable server, not the next idle one
on the old server (a plain psycopg_pool pool hands each of those out in turn, each failing
once)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core.engine.read_only import LeavingPool

from tests.ha.cluster import Cluster, Fault, failover

SIZE = 4


async def _open(pool_class: type[AsyncConnectionPool[Any]], url: str) -> Any:
    pool = pool_class(url, min_size=SIZE, max_size=SIZE, open=False,
                      kwargs={"autocommit": True}, timeout=10)
    await pool.open(wait=True, timeout=10)
    return pool


async def _write(pool: AsyncConnectionPool[AsyncConnection[Any]]) -> int:
    """One write through `pool.connection()`; the port of the server that took it."""
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO taskboard_jobs (kind) VALUES ('noop')")
        return int(conn.info.port)


async def test_one_read_only_error_moves_the_whole_pool_to_the_writable_server(
    cluster: Cluster,
) -> None:
    pool = await _open(LeavingPool, cluster.url)
    try:
        assert await _write(pool) == cluster.primary.port
        await failover(cluster, Fault.READ_ONLY)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            await _write(pool)
        # Every following write lands on the promoted standby: none meets the old server.
        for _ in range(SIZE * 2):
            assert await _write(pool) == cluster.standby.port
    finally:
        await pool.close()
