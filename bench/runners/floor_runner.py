"""The floor: the least a leased queue in Python can do per job, as one worker process.

Not a queue anyone should run: it exists to show how fast *any* Python worker with leases
and a fence could go on this machine, so a throughput target can be checked against what is
possible at all. Per batch it sends one statement, which completes the previous batch
(fenced on its lease token) and claims the next one (`FOR UPDATE SKIP LOCKED`, a fresh
token and a deadline): one round trip per batch, nothing else. Each job's "handler" is a
plain function call. What it leaves out, and every real queue here pays for: a task per
job, lease renewal, attempts and history, retries, counts, events, per-row verdicts, a
pool, LISTEN/NOTIFY (it polls every 5 ms when the queue is empty).

Its table and enqueue live in bench/systems.py (`FloorClient`). uvloop, as the peers.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import uuid
from typing import Any

import protocol
import uvloop

# One statement per round trip. Both CTEs run on the statement's snapshot: the ack sees
# the previous batch (state 1, our token) and the claim skips it (state 0 only).
ACK_AND_CLAIM = """
WITH ack AS (
    UPDATE floor_jobs SET state = 2
    WHERE id = ANY({ids}) AND lease_token = {old} AND state = 1
    RETURNING 1
), claim AS (
    UPDATE floor_jobs SET state = 1, lease_token = {new},
                          lease_deadline = now() + interval '60 seconds'
    WHERE id IN (SELECT id FROM floor_jobs WHERE state = 0 ORDER BY id
                 LIMIT {n} FOR UPDATE SKIP LOCKED)
    RETURNING id, kind
)
SELECT -1, (SELECT count(*) FROM ack)::text
UNION ALL
SELECT id, kind FROM claim
"""

IDLE_POLL = 0.005


def noop(kind: str) -> None:
    """The no-op handler."""


HANDLERS = {"noop": noop}


class Fenced(RuntimeError):
    """The previous batch's ack changed fewer rows than it held: a lease was lost."""


async def run(execute: Any, batch: int, stop: asyncio.Event) -> None:
    """Claim, run, ack-and-claim until `stop` is set and the held batch is acked."""
    held: list[int] = []
    token = uuid.uuid4()
    while True:
        new = uuid.uuid4()
        limit = 0 if stop.is_set() else batch
        rows = await execute(held, token, new, limit)
        acked = int(rows[0][1])
        if acked != len(held):
            raise Fenced(f"acked {acked} of {len(held)}: lease lost")
        held = [row[0] for row in rows[1:]]
        token = new
        for _, kind in rows[1:]:
            HANDLERS[kind](kind)
        if not held:
            if stop.is_set():
                return
            await asyncio.sleep(IDLE_POLL)


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if args.driver == "asyncpg":
        import asyncpg

        conn = await asyncpg.connect(args.url)
        statement = await conn.prepare(ACK_AND_CLAIM.format(
            ids="$1::bigint[]", old="$2::uuid", new="$3::uuid", n="$4::int"))

        async def execute(ids: list[int], old: uuid.UUID, new: uuid.UUID, n: int) -> Any:
            return await statement.fetch(ids, old, new, n)
    else:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(args.url, autocommit=True,
                                                     prepare_threshold=0)
        query = ACK_AND_CLAIM.format(ids="%s::bigint[]", old="%s::uuid", new="%s::uuid",
                                     n="%s::int")

        async def execute(ids: list[int], old: uuid.UUID, new: uuid.UUID, n: int) -> Any:
            cur = await conn.execute(query, (ids, old, new, n), binary=True)
            return await cur.fetchall()
    protocol.ready()
    try:
        await run(execute, args.batch_size, stop)
    finally:
        await conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--id", required=True, help="label only")
    parser.add_argument("--driver", choices=["psycopg", "asyncpg"], default="psycopg")
    parser.add_argument("--batch-size", type=int, default=100)
    uvloop.run(main(parser.parse_args()))
