"""`enqueue` and `enqueue_many` as the public API has them: one name for both kinds of
psycopg connection. With an `AsyncConnection` they return a coroutine to await; with a
sync `Connection` (a WSGI application's, Django's) they enqueue at once, in that
connection's transaction."""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, overload

from psycopg import AsyncConnection, Connection
from taskboard.core.kinds import KindRegistry
from taskboard.core.queue import jobs, jobs_sync
from taskboard.core.queue.jobs import NewJob


@overload
def enqueue_many(
    conn: Connection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[int]: ...


@overload
def enqueue_many(
    conn: AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> Coroutine[Any, Any, list[int]]: ...


def enqueue_many(
    conn: Connection[Any] | AsyncConnection[Any], registry: KindRegistry, jobs: Sequence[NewJob]
) -> list[int] | Coroutine[Any, Any, list[int]]:
    """Validate every job, then insert them all or none; their ids in input order.

    Inside your transaction the jobs exist only if it commits, and workers hear of them
    (NOTIFY) only then. Sync connection: returns the ids; async: a coroutine to await.
    """
    if isinstance(conn, Connection):
        return jobs_sync.enqueue_many_sync(conn, registry, jobs)
    return _async_many(conn, registry, jobs)


@overload
def enqueue(
    conn: Connection[Any], registry: KindRegistry, kind: str, payload: Any = None, **opts: Any
) -> int: ...


@overload
def enqueue(
    conn: AsyncConnection[Any], registry: KindRegistry, kind: str, payload: Any = None,
    **opts: Any,
) -> Coroutine[Any, Any, int]: ...


def enqueue(
    conn: Connection[Any] | AsyncConnection[Any],
    registry: KindRegistry,
    kind: str,
    payload: Any = None,
    **opts: Any,
) -> int | Coroutine[Any, Any, int]:
    """Enqueue one job (options as `NewJob`'s); its id, or a coroutine giving it."""
    if isinstance(conn, Connection):
        return jobs_sync.enqueue_sync(conn, registry, kind, payload, **opts)
    return jobs.enqueue(conn, registry, kind, payload, **opts)


async def _async_many(
    conn: AsyncConnection[Any], registry: KindRegistry, batch: Sequence[NewJob]
) -> list[int]:
    return await jobs.enqueue_many(conn, registry, batch)
