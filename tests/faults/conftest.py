"""Fixtures of the fault suite: a database on a server the test may restart."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from taskboard.core.engine.schema import migrate
from taskboard.core.runtime.embedded import EmbeddedPostgres

from tests.faults.server import stop_postgres

RestartableDb = tuple[str, Callable[[], None]]


async def _migrate(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)


def _local_data_dir(url: str) -> Path | None:
    """The session server's data folder, when it is an embedded server of this machine."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    path = Path(row[0]) if row else None
    return path if path is not None and (path / "PG_VERSION").exists() else None


@pytest.fixture(scope="session")
def restarted_servers(pg_server_url: str) -> Iterator[set[Path]]:
    """Data folders of session servers these tests restarted; stopped at the session's end.

    A restarted embedded server is not always stopped by `EmbeddedPostgres.stop()` (it
    checks the first postmaster, which the restart replaced), so it would outlive pytest.
    This teardown runs after every test and just before the session server's own.
    """
    restarted: set[Path] = set()
    yield restarted
    for data_dir in restarted:
        stop_postgres(data_dir)


@pytest.fixture
def fault_db(
    pg_server_url: str,
    make_db: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
    restarted_servers: set[Path],
) -> Iterator[RestartableDb]:
    """A fresh migrated database and a function that restarts its server.

    On the embedded session server this is the session server itself (attached to, never
    stopped here). Against `TASKBOARD_TEST_DATABASE_URL` on another host the test cannot
    restart that server, so it gets its own embedded one in a temporary folder.
    """
    data_dir = None
    try:
        data_dir = _local_data_dir(pg_server_url)
    except (psycopg.Error, OSError):
        data_dir = None
    if data_dir is not None:
        server = EmbeddedPostgres(data_dir, keep_running=True)  # attach; never stop it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.start()
        restarted_servers.add(data_dir)
        yield make_db(), server.restart
        return
    own = EmbeddedPostgres(tmp_path_factory.mktemp("faultpg") / "data")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        url = own.start()
    try:
        asyncio.run(_migrate(url))
        yield url, own.restart
    finally:
        own.stop()
        stop_postgres(own.data_dir)
