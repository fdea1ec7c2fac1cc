"""The faults issue 22 adds to the harness:

- drop:     every worker connection forgotten by the network in the middle (no RST; new
            connections work), through `tests/drop_proxy.py`'s DropProxy, which the workers
            connect through when it exists (the fault is left out of plans until then);
- oversize: rows of a few megabytes written by hand, past enqueue's checks (a schema that
            refuses them is a pass); the queue must not stall on them;
- tz:       the database's time zone changed for new sessions (`ALTER DATABASE ... SET
            timezone`), and one worker's connections cut so it comes back in that zone.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from tests.faults.checker import Window

if TYPE_CHECKING:
    from tests.faults.harness import FaultHarness, PlannedFault

# Zones whose offset is not a whole hour: a `*/2` minute schedule read there fires at the
# wrong minutes (bug 4 of issue 22); whole-hour zones move daily schedules only.
ZONES = ("Asia/Kathmandu", "Pacific/Chatham", "America/New_York")
MB = 1024 * 1024
APP_PREFIX = "tbfault-"  # the harness's application_name prefix (workers: tbfault-fw<n>)


def drop_proxy_class() -> Any | None:
    """`DropProxy` from tests/drop_proxy.py (written by the connections work), or None."""
    try:
        module = importlib.import_module("tests.drop_proxy")
    except ImportError:
        return None
    return getattr(module, "DropProxy", None)


DROP_AVAILABLE = drop_proxy_class() is not None


async def start_proxy(url: str) -> Any:
    """A started DropProxy in front of the server of `url`."""
    proxy_class = drop_proxy_class()
    assert proxy_class is not None
    proxy = proxy_class.for_url(url)  # a TCP host or the embedded server's socket folder
    await proxy.__aenter__()
    return proxy


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def fault_drop(harness: FaultHarness, fault: PlannedFault) -> str:
    """Every flow through the proxy forgotten at once: the workers' sockets stay open, and
    nothing they send arrives, nor any answer.

    The server's ends of the dropped flows stay open too (the proxy keeps them, as a real
    server keeps its sockets until its own keepalives give up, hours later); after the
    workers' time to notice they are terminated, so a few drops do not use up
    `max_connections` and no forgotten transaction holds its locks for the rest of the run.
    """
    if harness.proxy is None:
        return "no drop proxy (tests/drop_proxy.py missing): skipped"

    async def worker_backends(conn: psycopg.AsyncConnection[Any]) -> list[int]:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
            (APP_PREFIX + "fw%",),
        )
        return [int(row[0]) for row in await cur.fetchall()]

    before = await harness._db.run(worker_backends)
    start = datetime.now(UTC)
    dropped = await _maybe_await(harness.proxy.drop_flows())
    harness.seen.windows.append(Window("drop", None, start, datetime.now(UTC)))
    await asyncio.sleep(fault.seconds)

    async def reap(conn: psycopg.AsyncConnection[Any]) -> int:
        cur = await conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid = ANY(%s)",
            (before,),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    reaped = await harness._db.run(reap)
    return (f"{dropped} worker connections silently dropped (no FIN, no RST); "
            f"{reaped} server ends closed {fault.seconds:.1f}s later")


async def fault_oversize(harness: FaultHarness, fault: PlannedFault) -> str:
    """`amount` rows of a few MB: a noop padded past any sane size (invalid: it must die) or
    an email with a body just under the kind's 2 MB limit (valid: it must be sent)."""
    rng = harness.rng
    rows: list[tuple[str, str]] = []
    for _ in range(fault.amount):
        if fault.variant == "noop-pad":
            payload: dict[str, Any] = {"pad": "x" * rng.randint(2 * MB, 5 * MB)}
            rows.append(("noop", json.dumps(payload)))
        else:
            n = rng.randrange(10**6)
            payload = {"to": [f"big{n}@example.com"], "subject": f"Big {n}",
                       "text": "y" * rng.randint(MB, MB * 3 // 2)}
            rows.append(("email", json.dumps(payload)))

    sizes = "+".join(f"{len(p) / MB:.1f}" for _, p in rows)
    try:
        ids = await harness.insert_by_hand(rows, harness.config.max_attempts)
    except psycopg.DatabaseError as exc:  # a CHECK, a trigger, a size limit: all fine
        first = (str(exc).splitlines() or [""])[0][:120]
        return (f"{len(rows)} {fault.variant} row(s) of {sizes} MB refused by the schema"
                f" ({type(exc).__name__}: {first})")
    harness.seen.oversized_ids += ids
    return f"{len(ids)} {fault.variant} row(s) of {sizes} MB: {ids}"


async def fault_tz(harness: FaultHarness, fault: PlannedFault) -> str:
    """New sessions get another time zone; one worker reconnects into it."""
    zone = ZONES[harness.seen.faults["tz"] % len(ZONES)]

    async def change(conn: psycopg.AsyncConnection[Any]) -> str:
        cur = await conn.execute("SELECT current_database()")
        row = await cur.fetchone()
        assert row is not None
        await conn.execute(
            sql.SQL("ALTER DATABASE {} SET timezone TO {}").format(
                sql.Identifier(row[0]), sql.Literal(zone)
            )
        )
        return str(row[0])

    await harness._db.run(change)
    proc = harness._any_worker()
    start = datetime.now(UTC)

    async def cut(conn: psycopg.AsyncConnection[Any]) -> int:
        from tests.faults.harness import terminate_backends

        return await terminate_backends(conn, proc.id)

    cut_count = await harness._db.run(cut)
    harness.seen.windows.append(Window("tz", proc.id, start, datetime.now(UTC)))
    return f"database time zone now {zone}; {proc.id}: {cut_count} backends cut to reconnect in it"
