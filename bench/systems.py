"""The harness side of each system: schema, enqueue, progress, and how to start its worker.

Each client talks to one fresh database. Enqueueing uses each system's own batch API
(one statement per batch for all three); progress is read with plain SQL on a separate
connection, so every system is timed by the same rule: a job counts when the database
says it is finished, not when a handler returned.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from common import RUNNERS_DIR, BenchServer


@dataclass(frozen=True)
class Flavor:
    """One configuration of one system as it appears in a table row.

    `label` names the system (and driver); `config` says which configuration, in words a
    reader can reproduce (every row and every ratio names it).
    """

    system: str  # taskboard | procrastinate | pgqueuer
    label: str
    runner_args: tuple[str, ...] = ()
    config: str = ""
    # Taskboard only: another checkout whose engine the workers (and this flavor's
    # migrate and enqueue) run, through runners/rooted.py; "" = the bench's own.
    root: str = ""

    @property
    def name(self) -> str:
        """`label, config`: how a ratio names what it divides by."""
        return f"{self.label}, {self.config}" if self.config else self.label

    def but(self, config: str, *args: str) -> Flavor:
        """The same system and driver with other runner arguments."""
        base = tuple(self.runner_args[:2]) if self.runner_args[:1] == ("--driver",) else ()
        return Flavor(self.system, self.label, (*base, *args), config, self.root)


TASKBOARD = Flavor("taskboard", "Taskboard", (), "defaults (pool 10)")
# The peers at 8 in flight per worker, Taskboard's default: the configuration the older
# tables compared with, and the one renewal.py and rss.py still use.
PROCRASTINATE = Flavor("procrastinate", "procrastinate", ("--concurrency", "8", "--pool-size", "10"),
                       "8 in flight: concurrency 8, pool 10")
PGQUEUER = Flavor("pgqueuer", "PgQueuer (asyncpg)", ("--concurrency", "8", "--batch-size", "4"),
                  "8 in flight: batch 4, max_concurrent_tasks 8")
PGQUEUER_PSYCOPG = Flavor("pgqueuer", "PgQueuer (psycopg)",
                          ("--driver", "psycopg", "--concurrency", "8", "--batch-size", "4"),
                          "8 in flight: batch 4, max_concurrent_tasks 8")
# The peers as their own docs and CLIs run them when given no options.
PROCRASTINATE_DEFAULTS = Flavor("procrastinate", "procrastinate", (),
                                "defaults: concurrency 1, psycopg_pool's 4 connections")
PGQUEUER_DEFAULTS = Flavor("pgqueuer", "PgQueuer (asyncpg)", (),
                           "defaults: batch 10, no concurrency cap (as `pgq run`)")
PGQUEUER_PSYCOPG_DEFAULTS = Flavor("pgqueuer", "PgQueuer (psycopg)", ("--driver", "psycopg"),
                                   "defaults: batch 10, no concurrency cap (as `pgq run`)")



@functools.cache
def taskboard_runner_options() -> frozenset[str]:
    """The options bench/runners/taskboard_runner.py accepts, read from its --help.

    The engine's `--concurrency` (handlers that hold no connection) is new; the bench
    passes it only to a runner that takes it, and says so in its rows.
    """
    out = subprocess.run([sys.executable, str(RUNNERS_DIR / "taskboard_runner.py"), "--help"],
                         capture_output=True, text=True, check=False, timeout=60)
    return frozenset(re.findall(r"--[a-z][a-z-]*", out.stdout))


def taskboard_concurrency_default() -> int | None:
    """The engine's default `concurrency` for connection-free handlers, None before it exists."""
    from taskboard.core.engine.settings import WorkerSettings

    value = getattr(WorkerSettings(worker_id="probe"), "concurrency", None)
    return value if isinstance(value, int) else None


def taskboard_defaults() -> Flavor:
    """Taskboard with no options, its configuration spelled out."""
    concurrency = taskboard_concurrency_default()
    if concurrency is None:
        return TASKBOARD
    return Flavor("taskboard", "Taskboard", (), f"defaults (pool 10, concurrency {concurrency})")


# The floor (bench/runners/floor_runner.py): a bare leased queue in Python, no product
# around it. Not a peer: measured only with `throughput.py --floor`, to show what any
# Python worker could reach here. It has no defaults of its own; batches of 100 are the
# size the issue asks Taskboard to claim.
FLOOR_PSYCOPG = Flavor("floor", "Floor (psycopg)", ("--driver", "psycopg", "--batch-size", "100"),
                       "batch 100")
FLOOR_ASYNCPG = Flavor("floor", "Floor (asyncpg)", ("--driver", "asyncpg", "--batch-size", "100"),
                       "batch 100")

DEFAULT_FLAVORS = {"taskboard": TASKBOARD, "procrastinate": PROCRASTINATE, "pgqueuer": PGQUEUER}
# Each system with no options at all: pickup latency and recovery compare these.
AT_DEFAULTS = {"taskboard": TASKBOARD, "procrastinate": PROCRASTINATE_DEFAULTS,
               "pgqueuer": PGQUEUER_DEFAULTS}


def runner_argv(flavor: Flavor, url: str, worker_id: str, *extra: str) -> list[str]:
    """Arguments (after the interpreter) that start one worker of `flavor`."""
    script = RUNNERS_DIR / f"{flavor.system}_runner.py"
    rooted = [str(RUNNERS_DIR / "rooted.py"), flavor.root] if flavor.root else []
    return [*rooted, str(script), "--url", url, "--id", worker_id, *flavor.runner_args, *extra]


def checkout_label(root: str) -> str:
    """`main@cb1bdb0`: a checkout's folder name and commit (a dirty tree is marked +)."""
    path = Path(root).resolve()

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True,
                             check=False, timeout=30)
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    dirty = "+" if git("status", "--porcelain", "--untracked-files=no", "--", "core") else ""
    return f"{path.name}@{commit}{dirty}"


def taskboard_at(root: str) -> Flavor:
    """Taskboard's defaults from the checkout at `root` (`--taskboard-root PATH`).

    Raises SystemExit(2) when `root` is not a checkout (no .typecheck/taskboard/core).
    """
    path = Path(root).resolve()
    if not (path / ".typecheck" / "taskboard" / "core").is_dir():
        sys.stderr.write(f"--taskboard-root {root}: not a Taskboard checkout "
                         "(no .typecheck/taskboard/core)\n")
        raise SystemExit(2)
    base = taskboard_defaults()
    return Flavor("taskboard", f"Taskboard [{checkout_label(root)}]", (), base.config, str(path))


def taskboard_flavors(roots: list[str]) -> list[Flavor]:
    """Taskboard at its defaults: the bench's own checkout, or each `--taskboard-root`."""
    return [taskboard_at(r) for r in roots] if roots else [taskboard_defaults()]


class Client(abc.ABC):
    """Enqueue side of one system on one database."""

    remaining_sql: str = ""

    def __init__(self, url: str) -> None:
        self.url = url
        self._count_conn: psycopg.AsyncConnection[Any] | None = None

    async def open(self) -> None:
        """Connect, and install the system's schema."""
        self._count_conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)

    async def close(self) -> None:
        """Disconnect."""
        if self._count_conn is not None:
            await self._count_conn.close()

    async def remaining(self) -> int:
        """Jobs the database does not yet record as finished."""
        assert self._count_conn is not None
        cur = await self._count_conn.execute(self.remaining_sql)  # type: ignore[arg-type]
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def analyze(self) -> None:
        """ANALYZE the whole database (fresh statistics, as autovacuum would make)."""
        assert self._count_conn is not None
        await self._count_conn.execute("ANALYZE")

    @abc.abstractmethod
    async def enqueue_noops(self, n: int) -> None:
        """Enqueue `n` no-op jobs with the system's batch API (one statement)."""

    async def enqueue_io(self, n: int, ms: float) -> None:
        """Enqueue `n` jobs that each await `ms` milliseconds (one statement)."""
        raise NotImplementedError(f"{type(self).__name__} has no I/O jobs")

    async def enqueue_keyed_io(self, keys: list[str], ms: float) -> float:
        """Enqueue one I/O job per key, reporting its start (one statement); returns the
        time.monotonic() right after the commit."""
        raise NotImplementedError(f"{type(self).__name__} has no I/O jobs")

    @abc.abstractmethod
    async def enqueue_probe(self, key: str) -> None:
        """Enqueue one job whose handler reports its start and returns."""

    @abc.abstractmethod
    async def enqueue_hold(self, key: str, seconds: float) -> None:
        """Enqueue one job whose handler reports its start and then runs `seconds`."""


class TaskboardClient(Client):
    """Taskboard through `taskboard.core.queue.jobs.enqueue_many`."""

    remaining_sql = ("SELECT count(*) FROM taskboard_jobs WHERE completed_at IS NULL "
                     "AND failed_at IS NULL AND cancelled_at IS NULL")

    async def open(self) -> None:
        from taskboard.core.engine.schema import migrate
        from tb_kinds import bench_registry

        await super().open()
        self.registry = bench_registry()
        self.conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        await migrate(self.conn)

    async def close(self) -> None:
        await self.conn.close()
        await super().close()

    async def _enqueue(self, jobs: list[Any]) -> None:
        from taskboard.core.queue.jobs import enqueue_many

        await enqueue_many(self.conn, self.registry, jobs)

    async def enqueue_noops(self, n: int) -> None:
        from taskboard.core.queue.jobs import NewJob

        await self._enqueue([NewJob("noop") for _ in range(n)])

    async def enqueue_probe(self, key: str) -> None:
        from taskboard.core.queue.jobs import NewJob

        await self._enqueue([NewJob("bench_probe", {"key": key})])

    async def enqueue_hold(self, key: str, seconds: float) -> None:
        from taskboard.core.queue.jobs import NewJob

        await self._enqueue([NewJob("bench_hold", {"key": key, "seconds": seconds})])

    async def enqueue_io(self, n: int, ms: float) -> None:
        from taskboard.core.queue.jobs import NewJob

        await self._enqueue([NewJob("bench_io", {"ms": ms}) for _ in range(n)])

    async def enqueue_keyed_io(self, keys: list[str], ms: float) -> float:
        from taskboard.core.queue.jobs import NewJob

        await self._enqueue([NewJob("bench_io", {"key": k, "ms": ms}) for k in keys])
        return time.monotonic()

    async def lease_left(self, key: str) -> float | None:
        """Seconds until the lease of the keyed job expires, by the database's clock."""
        cur = await self.conn.execute(
            "SELECT extract(epoch FROM lease_expires_at - now()) FROM taskboard_jobs "
            "WHERE payload->>'key' = %s AND lease_expires_at IS NOT NULL", (key,))
        row = await cur.fetchone()
        return float(row[0]) if row else None


class RootedTaskboardClient(Client):
    """Taskboard from another checkout: migrate and enqueue run in runners/tb_client.py,
    started through runners/rooted.py, so they are that checkout's code."""

    remaining_sql = TaskboardClient.remaining_sql

    def __init__(self, url: str, root: str) -> None:
        super().__init__(url)
        self.root = root
        self.proc: asyncio.subprocess.Process | None = None

    async def open(self) -> None:
        await super().open()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(RUNNERS_DIR / "rooted.py"), self.root,
            str(RUNNERS_DIR / "tb_client.py"), "--url", self.url,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        await self._ask("migrate")

    async def close(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            await self.proc.wait()
        await super().close()

    async def _ask(self, command: str) -> list[str]:
        assert self.proc is not None and self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(command.encode() + b"\n")
        await self.proc.stdin.drain()
        answer = (await self.proc.stdout.readline()).decode().split()
        if not answer or answer[0] != "OK":
            raise RuntimeError(f"tb_client ({self.root}) {command[:40]}: {' '.join(answer)}")
        return answer[1:]

    async def enqueue_noops(self, n: int) -> None:
        await self._ask(f"noops {n}")

    async def enqueue_io(self, n: int, ms: float) -> None:
        await self._ask(f"io {n} {ms}")

    async def enqueue_keyed_io(self, keys: list[str], ms: float) -> float:
        return float((await self._ask(f"keyed bench_io {ms} {','.join(keys)}"))[0])

    async def enqueue_probe(self, key: str) -> None:
        await self._ask(f"keyed bench_probe 0 {key}")

    async def enqueue_hold(self, key: str, seconds: float) -> None:
        raise NotImplementedError("hold jobs from another checkout: not needed yet")

    async def lease_left(self, key: str) -> float | None:
        """Seconds until the lease of the keyed job expires, by the database's clock."""
        got = (await self._ask(f"lease {key}"))[1]
        return None if got == "none" else float(got)


class ProcrastinateClient(Client):
    """procrastinate through its App and `batch_defer_async`."""

    remaining_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"

    async def open(self) -> None:
        from procrastinate_runner import build_app

        await super().open()
        self.app = build_app(self.url, pool_size=2)
        await self.app.open_async()
        await self.app.schema_manager.apply_schema_async()

    async def close(self) -> None:
        await self.app.close_async()
        await super().close()

    async def enqueue_noops(self, n: int) -> None:
        await self.app.configure_task("noop").batch_defer_async(*({} for _ in range(n)))

    async def enqueue_probe(self, key: str) -> None:
        await self.app.configure_task("probe").defer_async(key=key)

    async def enqueue_hold(self, key: str, seconds: float) -> None:
        await self.app.configure_task("hold").defer_async(key=key, seconds=seconds)

    async def enqueue_io(self, n: int, ms: float) -> None:
        await self.app.configure_task("io").batch_defer_async(*({"ms": ms} for _ in range(n)))

    async def enqueue_keyed_io(self, keys: list[str], ms: float) -> float:
        await self.app.configure_task("hold").batch_defer_async(
            *({"key": k, "seconds": ms / 1000} for k in keys))
        return time.monotonic()


class PgQueuerClient(Client):
    """PgQueuer through `Queries.enqueue` with lists (one statement) over asyncpg."""

    remaining_sql = "SELECT count(*) FROM pgqueuer"

    async def open(self) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        self.apg = await asyncpg.connect(self.url)
        self.queries = Queries(AsyncpgDriver(self.apg))
        await self.queries.install()
        await super().open()

    async def close(self) -> None:
        await self.apg.close()
        await super().close()

    async def enqueue_noops(self, n: int) -> None:
        await self.queries.enqueue(["noop"] * n, [None] * n, [0] * n)

    async def enqueue_probe(self, key: str) -> None:
        await self.queries.enqueue("probe", key.encode())

    async def enqueue_hold(self, key: str, seconds: float) -> None:
        await self.queries.enqueue("hold", f"{key}:{seconds}".encode())

    async def enqueue_io(self, n: int, ms: float) -> None:
        await self.queries.enqueue(["io"] * n, [f"{ms:g}".encode()] * n, [0] * n)

    async def enqueue_keyed_io(self, keys: list[str], ms: float) -> float:
        n = len(keys)
        await self.queries.enqueue(["hold"] * n, [f"{k}:{ms / 1000}".encode() for k in keys],
                                   [0] * n)
        return time.monotonic()


class FloorClient(Client):
    """The floor's table, filled with one INSERT ... SELECT."""

    remaining_sql = "SELECT count(*) FROM floor_jobs WHERE state <> 2"

    async def open(self) -> None:
        await super().open()
        assert self._count_conn is not None
        await self._count_conn.execute(
            "CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, kind text NOT NULL, "
            "state smallint NOT NULL DEFAULT 0, lease_token uuid, lease_deadline timestamptz)")
        await self._count_conn.execute(
            "CREATE INDEX floor_jobs_waiting ON floor_jobs (id) WHERE state = 0")

    async def enqueue_noops(self, n: int) -> None:
        assert self._count_conn is not None
        await self._count_conn.execute(
            "INSERT INTO floor_jobs (kind) SELECT 'noop' FROM generate_series(1, %s)", (n,))

    async def enqueue_probe(self, key: str) -> None:
        raise NotImplementedError("the floor measures throughput only")

    async def enqueue_hold(self, key: str, seconds: float) -> None:
        raise NotImplementedError("the floor measures throughput only")


CLIENTS: dict[str, type[Client]] = {
    "floor": FloorClient,
    "taskboard": TaskboardClient,
    # `taskboard worker` itself (runners/taskboard_cli_runner.py): the same schema and jobs.
    "taskboard_cli": TaskboardClient,
    "procrastinate": ProcrastinateClient,
    "pgqueuer": PgQueuerClient,
}


async def open_client(system: str, url: str, root: str = "") -> Client:
    """A connected client with the system's schema installed (`root`: Taskboard from
    another checkout, see `RootedTaskboardClient`)."""
    client = RootedTaskboardClient(url, root) if root else CLIENTS[system](url)
    await client.open()
    return client


@contextlib.asynccontextmanager
async def fresh_system(server: BenchServer, flavor: Flavor, label: str) -> AsyncIterator[
        tuple[str, str, Client]]:
    """A fresh database with `flavor`'s schema: yields (dbname, url, client); drops it after."""
    dbname, url = server.fresh_database(f"{flavor.system}_{label}")
    client = await open_client(flavor.system, url, flavor.root)
    try:
        yield dbname, url, client
    finally:
        await client.close()
        server.drop_database(dbname)
