"""The harness's Taskboard side in a process of its own, for a checkout given by
`--taskboard-root` (started through rooted.py, so it migrates and enqueues with that
checkout's code: another branch may change the schema or what enqueue writes).

One command per stdin line, one answer per stdout line, `OK <time.monotonic()>` taken
right after the command's commit (CLOCK_MONOTONIC is shared by every process on Linux,
so the harness compares it with its own clock), or `ERR <message>`:

    migrate
    noops N              N no-op jobs, one batch
    io N MS              N jobs of the bench_io kind (await MS milliseconds), one batch
    keyed KIND MS K1,K2  one job per key (bench_io: MS milliseconds; bench_probe), one batch
    lease KEY            the seconds left on the keyed job's lease (answer: `OK <t> <s|none>`)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import psycopg
from taskboard.core.engine.schema import migrate

# A checkout from before core/ was regrouped (bench --taskboard-root on an older commit) has
# its modules at core/'s top level; tried first, since this interpreter's own install could
# answer the new path with the wrong checkout's code.
try:
    from taskboard.core.jobs import NewJob, enqueue_many  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:
    from taskboard.core.queue.jobs import NewJob, enqueue_many
from tb_kinds import bench_registry


async def serve(url: str) -> None:
    registry = bench_registry()
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        words = line.split()
        extra = ""
        try:
            jobs: list[Any] = []
            if words[0] == "migrate":
                await migrate(conn)
            elif words[0] == "noops":
                jobs = [NewJob("noop") for _ in range(int(words[1]))]
            elif words[0] == "io":
                jobs = [NewJob("bench_io", {"ms": float(words[2])}) for _ in range(int(words[1]))]
            elif words[0] == "keyed":
                kind, ms = words[1], float(words[2])
                jobs = [NewJob(kind, {"key": key, "ms": ms} if kind == "bench_io" else {"key": key})
                        for key in words[3].split(",")]
            elif words[0] == "lease":
                cur = await conn.execute(
                    "SELECT extract(epoch FROM lease_expires_at - now()) FROM taskboard_jobs "
                    "WHERE payload->>'key' = %s AND lease_expires_at IS NOT NULL", (words[1],))
                row = await cur.fetchone()
                extra = f" {float(row[0])}" if row else " none"
            else:
                raise ValueError(f"unknown command {words[0]!r}")
            if jobs:
                await enqueue_many(conn, registry, jobs)
            answer = f"OK {time.monotonic():.6f}{extra}"
        except Exception as exc:  # the harness raises it, with the message
            answer = "ERR " + " ".join(str(exc).split())
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    await conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    asyncio.run(serve(parser.parse_args().url))
