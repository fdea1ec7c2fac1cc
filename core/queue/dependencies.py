"""Jobs that wait for others: `NewJob(after=[...])`, `enqueue(..., after=[...])`.

A child becomes claimable only when every parent has completed. Its parents must exist and
be neither dead nor cancelled when it is enqueued (so a cycle cannot be built: a parent
always exists before its child); a parent that later ends dead or cancelled cancels its
waiting children with a reason naming it, and retrying it makes them wait again. All of it
happens in the database, in the statements that end the parents (migration 13's trigger),
so a job nobody waits on pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, Connection
from taskboard.core import sql
from taskboard.core.base import tracing
from taskboard.core.base.errors import ValidationError

MAX_PARENTS = 1000


def check_after(after: Any) -> tuple[int, ...]:
    """`after` as a tuple of distinct job ids, or `ValidationError` naming the field."""
    if after is None:
        return ()
    if isinstance(after, int | str) or not isinstance(after, Sequence):
        raise ValidationError("must be a list of job ids", field="after")
    ids: list[int] = []
    for item in after:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 < item < 2**63:
            raise ValidationError(f"job ids are positive integers, got {item!r}", field="after")
        if item not in ids:
            ids.append(item)
    if len(ids) > MAX_PARENTS:
        raise ValidationError(f"names {len(ids)} jobs; at most {MAX_PARENTS}", field="after")
    return tuple(ids)


async def attach(
    conn: AsyncConnection[Any], children: Sequence[tuple[int, tuple[int, ...]]],
    span: tracing.Enqueuing | None = None,
) -> None:
    """Make each (child id, parent ids) wait for its parents; in the enqueue's transaction,
    which the `ValidationError` for a missing, dead or cancelled parent rolls back. The
    enqueue's `span` is linked to each parent's trace."""
    params = _params(children)
    if params is not None:
        cur = await conn.execute(sql.ATTACH_PARENTS, params)
        _check_answer(await cur.fetchone(), span)


def attach_sync(
    conn: Connection[Any], children: Sequence[tuple[int, tuple[int, ...]]],
    span: tracing.Enqueuing | None = None,
) -> None:
    """`attach` on a sync connection (`enqueue_sync`)."""
    params = _params(children)
    if params is not None:
        _check_answer(conn.execute(sql.ATTACH_PARENTS, params).fetchone(), span)


def _params(children: Sequence[tuple[int, tuple[int, ...]]]) -> dict[str, list[int]] | None:
    pairs = [(child, parent) for child, parents in children for parent in parents]
    if not pairs:
        return None
    return {"children": [c for c, _ in pairs], "parents": [p for _, p in pairs]}


def _check_answer(row: Any, span: tracing.Enqueuing | None) -> None:
    assert row is not None
    missing, over = sorted(row[0]), sorted(row[1])
    if span is not None and not missing and not over:
        for parent, traceparent, tracestate in row[2] or ():
            span.caused_by(traceparent, tracestate, "after", int(parent))
    if missing:
        shown = ", ".join(str(i) for i in missing)
        raise ValidationError(f"job {shown} does not exist (or was pruned)", field="after")
    if over:
        shown = ", ".join(str(i) for i in over)
        raise ValidationError(f"job {shown} is dead or cancelled: it will never complete",
                              field="after")


async def parent_results(conn: AsyncConnection[Any], job_id: int) -> dict[int, Any]:
    """{parent id: its result} for the parents of job `job_id`."""
    cur = await conn.execute(sql.PARENT_RESULTS, {"id": job_id})
    return {parent: result for parent, result in await cur.fetchall()}
