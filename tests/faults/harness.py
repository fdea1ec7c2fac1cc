"""Fault harness: real `taskboard worker` processes, one PostgreSQL, real faults.

The harness process runs ONE shared SMTP sink and ONE shared Stripe endpoint (the workers
get `TASKBOARD_SMTP_URL` / `TASKBOARD_STRIPE_API_BASE`), feeds jobs of every built-in kind
plus a few malformed rows written by hand, and injects faults drawn from a seeded RNG:

- stall:   SIGSTOP a worker holding jobs for longer than the lease, then SIGCONT;
- kill:    SIGKILL a worker in the middle of a handler (sleep) or of a send (email with a
           slow SMTP reply, billing with a slow Stripe), then start a replacement process;
- cut:     `pg_terminate_backend` of every backend of one worker (found by the
           `application_name` each worker gets in its database URL);
- restart: restart the database server while the workers run;
- smtp:    the sink answers 451 or 550, slows down, or goes down for a while;
- stripe:  the endpoint answers 500 or 429, declines a card, or slows down;
- readonly: the whole server turns read-only for under a lease (`default_transaction_read_only`
           and a reload), as during a managed database's switchover;
- lock:    another session holds `FOR UPDATE` on a job a worker holds, across its renewals;
- poison:  rows written by hand that make the claim statement itself fail (an overflowing
           attempt counter; a row a trigger refuses to let anyone claim);
- drain:   SIGTERM to a worker while its email is being sent to a slow SMTP server, with a
           drain timeout shorter than the send;
- freeze:  the postmaster and every backend SIGSTOPped for two leases, then SIGCONT;
- drop, oversize, tz: silently dropped connections, multi-MB rows written by hand, the
           database's time zone changed (tests/faults/faults_new.py);
- failover: against a primary and a standby, the primary killed, frozen or turned read-only
           and the standby promoted (tests/faults/failover.py).

With `FaultConfig.operator` set, an operator acts while the faults run: prunes with a short
retention, retries, cancels (billing ones during their Stripe confirm too), pauses the
queue, enqueues billing jobs that time out during their confirm, and keeps schedules firing
every second (tests/faults/operators.py). Rows deleted during the run are kept in an archive
the checker reads (tests/faults/archive.py).

Faults are applied one after another while jobs are fed, and a sampler reads the queue and
the workers' rows four times a second (the checker's evidence for "no worker is silent while
jobs wait"); then a tail of jobs is fed with no faults, the queue is drained, the workers
get SIGTERM, and `checker.check` reads what happened. The same seed gives the same jobs and the same fault plan (the interleaving
with the workers is up to the operating system).

Used by `tests/faults/test_fault_short.py` and `bench/soak.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.standins.smtp_sink import SmtpSink
from taskboard.core.standins.stripe_endpoint import StripeEndpoint

from tests.faults.archive import install_archive
from tests.faults.checker import FAULT_KINDS, Observed, Outage, Report, Sample, Window, check
from tests.faults.evidence import DROP_NOTICE_SECONDS
from tests.faults.failover import Replication, fault_failover
from tests.faults.faults_new import (
    DROP_AVAILABLE,
    fault_drop,
    fault_oversize,
    fault_tz,
    start_proxy,
)
from tests.faults.harness_rows import MALFORMED_ROWS, POISON_SETUP, SAMPLE_QUERY, UNKNOWN_KIND_ROWS
from tests.faults.machine import MachineWatch
from tests.faults.operators import Operator, OperatorConfig
from tests.faults.server import stop_postgres

__all__ = ["FaultConfig", "FaultHarness", "run_faults", "spawn_worker", "stop_postgres"]

T = TypeVar("T")

# Every completion logged: the checker holds each "completed" line against the attempt the
# database kept (at the default INFO a completion is routine and not written).
WORKER_COMMAND = (sys.executable, "-m", "taskboard.core.cli", "worker", "--log-every-job")
APP_PREFIX = "tbfault-"
HARNESS_APP = APP_PREFIX + "harness"
# Environment a worker must not inherit: another database, real Stripe, other mail settings.
SCRUBBED_ENV = (
    "DATABASE_URL",
    "TASKBOARD_DATABASE_URL",
    "STRIPE_API_KEY",
    "TASKBOARD_SMTP_URL",
    "TASKBOARD_STRIPE_API_BASE",
    "TASKBOARD_MAIL_FROM",
    "TASKBOARD_MESSAGE_ID_DOMAIN",
)

SHORT_FAULTS: Mapping[str, int] = {
    "stall": 2,
    "kill": 3,
    "cut": 3,
    "restart": 1,
    "smtp": 4,
    "stripe": 5,
    "readonly": 1,
    "lock": 1,
    "poison": 2,
    "drain": 1,
    "freeze": 1,
    "oversize": 1,
    "tz": 1,
    **({"drop": 1} if DROP_AVAILABLE else {}),
}
VARIANTS: Mapping[str, tuple[str, ...]] = {
    "stall": ("sigstop",),
    "kill": ("handler", "email", "billing"),
    "cut": ("backends",),
    "restart": ("server",),
    "smtp": ("451", "550", "slow", "down"),
    "stripe": ("500", "429", "decline", "slow", "latency"),
    "readonly": ("switchover",),
    "lock": ("row",),
    "poison": ("overflow", "trigger"),
    "drain": ("slow-smtp",),
    "freeze": ("server",),
    "drop": ("flows",),
    "oversize": ("noop-pad", "email-body"),
    "tz": ("zone",),
    "failover": ("kill", "freeze", "read_only"),
}
# Random fault kinds for duration-based runs (the soak): whole-server faults are rarer.
SOAK_WEIGHTS: Mapping[str, float] = {
    "stall": 2, "kill": 2, "cut": 2, "restart": 0.6, "smtp": 2, "stripe": 2,
    "readonly": 0.6, "lock": 1, "poison": 0.8, "drain": 1, "freeze": 0.5,
    "drop": 1 if DROP_AVAILABLE else 0, "oversize": 0.5, "tz": 0.3,
}
NEW_FAULTS = {
    "drop": fault_drop, "oversize": fault_oversize, "tz": fault_tz, "failover": fault_failover,
}
SAMPLE_SECONDS = 0.25
KNOWN_KINDS = builtin_registry().names()


def _now() -> datetime:
    return datetime.now(UTC)

@dataclass(frozen=True)
class FaultConfig:
    """One run. `fault_counts` fixes how many faults of each kind (the short run);
    with `fault_counts=None`, random kinds are drawn until `duration` seconds are planned
    (the soak)."""

    seed: int
    workers: int = 3  # worker processes at the start; each SIGKILL starts a replacement
    jobs: int = 1500  # fed while the faults run, the last `tail_fraction` after them
    lease: float = 1.5
    pool_size: int = 10  # per worker: 8 jobs in flight
    poll: float = 0.5
    fault_counts: Mapping[str, int] | None = field(default_factory=lambda: dict(SHORT_FAULTS))
    duration: float = 20.0  # seconds of faults to plan when `fault_counts` is None
    weights: Mapping[str, float] | None = None  # the soak's fault mix (None: SOAK_WEIGHTS)
    mean_gap: float = 0.25  # pauses between faults are uniform in [0.1, 2 * mean_gap] s
    tail_fraction: float = 0.1
    max_attempts: int = 30  # faults cost attempts; only real failures should kill a job
    retry_base: float = 0.1  # the workers' --retry-base
    # The workers' --drain-timeout: shorter than the slow sends of the drain fault, so a
    # drain meets a send in progress.
    drain_timeout: float = 0.5
    settle_timeout: float = 60.0  # for the queue to drain after the faults
    recovery_timeout: float = 20.0  # for each worker's first completion after a restart
    malformed: bool = True  # add the hand-written MALFORMED_ROWS
    operator: OperatorConfig | None = None  # an operator acting while the faults run


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the plan: wait `gap` seconds, then apply it."""

    kind: str
    variant: str
    gap: float
    seconds: float
    amount: int

    def expected_seconds(self) -> float:
        """Roughly how long applying it takes (for pacing the feeder)."""
        if self.kind in ("kill", "restart", "poison", "oversize", "tz"):
            return 0.5
        if self.kind == "failover":  # the promotion and the old primary's rebuild
            return self.seconds + 3.0
        return self.seconds


def plan_faults(config: FaultConfig, rng: random.Random) -> list[PlannedFault]:
    """The fault plan: a function of the seed only."""
    kinds: list[str] = []
    if config.fault_counts is not None:
        for kind in FAULT_KINDS:
            kinds += [kind] * config.fault_counts.get(kind, 0)
        rng.shuffle(kinds)
    plan: list[PlannedFault] = []
    # Variants go round a shuffled cycle, so a handful of faults covers every variant.
    cycles = {kind: rng.sample(VARIANTS[kind], len(VARIANTS[kind])) for kind in FAULT_KINDS}
    used: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
    planned = 0.0
    index = 0
    while True:
        if config.fault_counts is not None:
            if index >= len(kinds):
                break
            kind = kinds[index]
        else:
            if planned >= config.duration:
                break
            mix = config.weights or SOAK_WEIGHTS
            names = list(mix)
            kind = rng.choices(names, weights=[mix[n] for n in names])[0]
        index += 1
        variant = cycles[kind][used[kind] % len(cycles[kind])]
        used[kind] += 1
        seconds, amount = 0.1, 1
        if kind == "stall":
            seconds = config.lease * rng.uniform(1.4, 2.0)
        elif kind == "smtp" and variant == "451":
            amount = rng.randint(1, 3)
        elif kind == "smtp" and variant in ("slow", "down"):
            seconds = rng.uniform(0.5, 1.5)
        elif kind == "stripe" and variant in ("500", "429"):
            amount = rng.randint(1, 3)
        elif kind == "stripe" and variant == "slow":
            seconds = config.lease * rng.uniform(0.5, 2.0)
        elif kind == "stripe" and variant == "latency":
            seconds = rng.uniform(0.5, 1.5)
        elif kind == "readonly":
            # Under a lease: with this single-host URL there is nowhere else to write, and a
            # worker that finds no writable server for a lease exits 4 by design (tests/ha).
            seconds = config.lease * rng.uniform(0.3, 0.6)
        elif kind == "lock":
            seconds = config.lease * rng.uniform(1.5, 2.5)
        elif kind in ("poison", "oversize"):
            amount = rng.randint(1, 2)
        elif kind == "drain":
            # Below and above the time left to the local deadline: the send either finishes
            # within the drain's wait or the lease is left to expire.
            seconds = config.lease * rng.uniform(0.4, 1.5)
        elif kind == "freeze":
            seconds = config.lease * rng.uniform(2.0, 2.5)
        elif kind == "drop":  # the workers' time to notice, then the server ends close
            seconds = config.lease / 2 + DROP_NOTICE_SECONDS + 1.0
        elif kind == "failover":  # with asynchronous replication: how long the standby lags
            seconds = rng.uniform(0.5, 1.5)
        gap = rng.uniform(0.1, 2 * config.mean_gap)
        if kind == "readonly" and plan and plan[-1].kind == "readonly":
            # Two switchovers closer than a lease are, to a worker, one read-only time
            # longer than a lease, which it leaves by design (seen: 1.1 s, 0.4 s, 0.7 s).
            gap = max(gap, config.lease)
        fault = PlannedFault(kind, variant, gap, seconds, amount)
        plan.append(fault)
        planned += fault.gap + fault.expected_seconds()
    return plan


def make_jobs(config: FaultConfig, rng: random.Random, count: int, start: int) -> list[NewJob]:
    """`count` jobs of the real kinds; some billing jobs use a card that is declined."""
    jobs = []
    for n in range(start, start + count):
        r = rng.random()
        if r < 0.5:
            kind, payload = "noop", {}
        elif r < 0.7:
            seconds = rng.uniform(0.02, 0.4)
            if rng.random() < 0.05:  # longer than the lease: only renewal keeps it
                seconds = config.lease * rng.uniform(1.2, 2.0)
            kind, payload = "sleep", {"seconds": round(seconds, 3)}
        elif r < 0.87:
            kind, payload = "email", {
                "to": [f"user{n}@example.com"],
                "subject": f"Receipt {n}",
                "text": f"Thanks for order {n}.",
            }
        else:
            kind, payload = "billing", {
                "customer": f"cus_fault{n}",
                "amount": rng.randint(100, 99_999),
                "currency": rng.choice(["usd", "eur", "gbp"]),
            }
            if rng.random() < 0.04:
                payload["payment_method"] = "pm_card_chargeDeclined"
        jobs.append(NewJob(kind, payload, max_attempts=config.max_attempts))
    return jobs


def with_application_name(url: str, name: str) -> str:
    """`url` with `application_name` set, so the worker's backends can be found."""
    if "://" not in url:
        return psycopg.conninfo.make_conninfo(url, application_name=name)
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k != "application_name"]
    query.append(("application_name", name))
    return urlunsplit(parts._replace(query=urlencode(query)))


def spawn_worker(
    db_url: str,
    worker_id: str,
    log_path: Path,
    *,
    lease: float = 1.0,
    pool_size: int = 10,
    poll: float = 0.5,
    retry_base: float = 0.1,
    drain_timeout: float = 2.0,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `taskboard worker` with stdout and stderr in `log_path`.

    Its database URL names it (`application_name=tbfault-<id>`) so its backends can be
    found; inherited settings that could point it elsewhere are dropped first.
    """
    full_env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    full_env["TASKBOARD_DATABASE_URL"] = with_application_name(db_url, APP_PREFIX + worker_id)
    full_env.update(env or {})
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [
                *WORKER_COMMAND,
                "--id", worker_id,
                "--lease", f"{lease:g}",
                "--pool-size", str(pool_size),
                "--poll", f"{poll:g}",
                "--retry-base", f"{retry_base:g}",
                "--drain-timeout", f"{drain_timeout:g}",
            ],
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of the harness does not reach them
        )


@contextlib.asynccontextmanager
async def read_only_server(admin: psycopg.AsyncConnection[Any], url: str) -> AsyncIterator[None]:
    """The whole server read-only while the block runs, as during a managed database's
    switchover (`ALTER SYSTEM SET default_transaction_read_only = on` and a reload); `admin`
    is set writable for its own session first, so it can turn it back."""
    await admin.execute("SET default_transaction_read_only = off")
    await admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
    await admin.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        await server_writable_again(admin, url)


async def server_writable_again(admin: psycopg.AsyncConnection[Any], url: str) -> None:
    """Undo a read-only window (`ALTER SYSTEM SET default_transaction_read_only = on`) and
    return once a new session on `url` is writable: the reload is asynchronous, and a
    session opened before the postmaster has read it is read-only, so without this wait
    the next test on the same server could start one. (Added after a worker of
    tests/test_board_counts.py logged 'no writable server' in CI; that saw seconds of
    read-only sessions, which this short window does not explain.)"""
    await admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
    await admin.execute("SELECT pg_reload_conf()")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as fresh:
            cur = await fresh.execute("SHOW default_transaction_read_only")
            row = await cur.fetchone()
        if row is not None and row[0] == "off":
            return
        assert loop.time() < deadline, "the server stayed read-only 30 s after the reset"
        await asyncio.sleep(0.05)


async def terminate_backends(conn: psycopg.AsyncConnection[Any], worker_id: str) -> int:
    """Cut every database connection of one worker; returns how many were cut."""
    cur = await conn.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name = %s",
        (APP_PREFIX + worker_id,),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


@dataclass
class WorkerProc:
    """One `taskboard worker` process the harness started."""

    id: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    killed: bool = False
    stopped: bool = False  # SIGSTOPped right now
    drained: bool = False  # sent SIGTERM by the drain fault

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def usable(self) -> bool:
        """Running, not killed, not stalled, not draining: a fair target for the next fault."""
        return self.alive and not self.killed and not self.stopped and not self.drained


class _Db:
    """One autocommit connection that reconnects after cuts and restarts."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def run(
        self, op: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]], timeout: float = 60.0
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = await psycopg.AsyncConnection.connect(
                        self.url, autocommit=True, connect_timeout=5
                    )
                return await op(self.conn)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                await self.close()
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)
            except psycopg.errors.ReadOnlySqlTransaction:
                # The read-only fault: the harness's own writes wait it out as well.
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def fetch(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async def op(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            cur = await conn.execute(query, params)  # type: ignore[arg-type]
            return await cur.fetchall()

        return await self.run(op)

    async def now(self) -> datetime:
        rows = await self.fetch("SELECT now()")
        return rows[0][0]  # type: ignore[no-any-return]

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
        self.conn = None


class FaultHarness:
    """Runs one fault run against `db_url` (a migrated, empty Taskboard database).

    `restart` restarts the database server (blocking; run in a thread); it is required
    when the plan holds restarts. Logs go to `workdir`. Use as an async context manager
    so every process it started is gone afterwards, whatever happened.
    """

    def __init__(
        self,
        db_url: str,
        config: FaultConfig,
        workdir: Path,
        *,
        restart: Callable[[], None] | None = None,
        freeze: Callable[[float], None] | None = None,
        echo: Callable[[str], None] | None = None,
        replication: Replication | None = None,
    ) -> None:
        self.url = db_url
        self.config = config
        self.workdir = workdir
        self.restart = restart
        self.freeze = freeze
        self.echo = echo or (lambda line: print(line, flush=True))
        self.rng = random.Random(config.seed)
        self.plan = plan_faults(config, self.rng)
        if self.restart is None and any(f.kind == "restart" for f in self.plan):
            raise ValueError("the fault plan restarts the database: pass restart=")
        if self.freeze is None and any(f.kind == "freeze" for f in self.plan):
            raise ValueError("the fault plan freezes the database: pass freeze=")
        self.replication = replication
        if self.replication is None and any(f.kind == "failover" for f in self.plan):
            raise ValueError("the fault plan fails over: pass replication=")
        # Held by the failover fault across a promotion (tests/faults/failover.py).
        self.enqueue_lock = asyncio.Lock()
        self.sink = SmtpSink(max_messages=10_000_000)
        self.stripe = StripeEndpoint()
        self.procs: dict[str, WorkerProc] = {}
        self.seen = Observed(
            seed=config.seed, lease=config.lease, recovery_timeout=config.recovery_timeout,
            replication=replication,
        )
        self._machine = MachineWatch(self.seen.windows)
        self.fault_log: list[str] = []
        self._db = _Db(with_application_name(db_url, HARNESS_APP))
        self._feeder_db = _Db(with_application_name(db_url, HARNESS_APP))
        self._sampler_db = _Db(with_application_name(db_url, HARNESS_APP))
        self._next_worker = 0
        self._started = 0.0
        self.proxy: Any = None  # the DropProxy the workers connect through, when planned

    async def __aenter__(self) -> FaultHarness:
        if self.replication is not None:
            await asyncio.to_thread(self.replication.start)
        await self.sink.start()
        await self.stripe.start()
        if DROP_AVAILABLE and any(f.kind == "drop" for f in self.plan):
            self.proxy = await start_proxy(self.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            if proc.alive:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGCONT)
                    proc.popen.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.popen.wait, 10)
        await self._db.close()
        await self._feeder_db.close()
        await self._sampler_db.close()
        if self.proxy is not None:
            await self.proxy.__aexit__(None, None, None)
        await self.stripe.stop()
        await self.sink.stop()

    # --- the run -------------------------------------------------------------------------

    async def run(self) -> Report:
        """Feed, inject, drain, stop, check."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        self.echo(
            f"taskboard fault run: seed={cfg.seed} workers={cfg.workers} jobs={cfg.jobs} "
            f"lease={cfg.lease:g}s faults={len(self.plan)} "
            f"(replay: TASKBOARD_FAULT_SEED={cfg.seed} pytest, or bench/soak.py --seed {cfg.seed})"
        )
        await self._db.run(self._install_poison_trigger)
        await self._db.run(install_archive)
        if cfg.malformed:
            await self._insert_malformed()
        for _ in range(cfg.workers):
            self._spawn()
        await self._wait_registered(list(self.procs))
        sampler = loop.create_task(self._sample())
        self._machine.__enter__()
        operator = None
        if cfg.operator is not None:
            operator = Operator(
                with_application_name(self.url, HARNESS_APP), cfg.operator, self.seen,
                self.stripe, seed=cfg.seed, lease=cfg.lease, enqueue=self._enqueue,
                log=self.fault_log.append, started=self._started,
            )
            await operator.start()
        operator_done = asyncio.Event()
        acting = loop.create_task(operator.run(operator_done)) if operator else None

        tail = int(cfg.jobs * cfg.tail_fraction)
        main = cfg.jobs - tail
        jobs = make_jobs(cfg, self.rng, cfg.jobs, 1)
        pace = sum(f.gap + f.expected_seconds() for f in self.plan) or 1.0
        faults_done = asyncio.Event()
        feeder = loop.create_task(self._feed(jobs[:main], pace, faults_done))
        try:
            await self._apply_plan()
            faults_done.set()
            operator_done.set()
            await feeder
            if acting is not None:
                await acting
        finally:
            for task in (feeder, acting):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if operator is not None:
                await operator.finish()
                await operator.close()
        self._note_deaths()
        await self._wait_registered([p.id for p in self.procs.values() if p.usable])
        await self._enqueue(jobs[main:])  # a tail with no faults: the fleet must still work
        await self._await_recovery()
        await self._settle()
        self._note_deaths()
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        self._machine.__exit__()
        await self._stop_workers()
        self.seen.messages = self.sink.messages()
        self.seen.charges = self.stripe.charges()
        self.seen.stripe_requests = self.stripe.requests()
        await asyncio.to_thread(keep_external, self.workdir / EXTERNAL_FILE, self.seen)
        self.seen.elapsed = loop.time() - self._started
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            report = await check(conn, self.seen)
        report.notes.extend(self.fault_log)
        return report

    # --- feeding -------------------------------------------------------------------------

    async def _insert_malformed(self) -> None:
        self.seen.malformed_ids = await self.insert_by_hand(
            MALFORMED_ROWS, self.config.max_attempts
        )
        self.seen.unknown_ids = await self.insert_by_hand(UNKNOWN_KIND_ROWS)

    async def insert_by_hand(
        self, rows: Sequence[tuple[str, str]], max_attempts: int | None = None
    ) -> list[int]:
        """Insert (kind, payload JSON) rows as a buggy producer would, past the API's checks
        (max_attempts: the column's default when None); their ids. The schema may refuse
        them (`psycopg.DatabaseError`)."""
        columns = "kind, payload" if max_attempts is None else "kind, payload, max_attempts"
        values = "%s, %s::jsonb" if max_attempts is None else "%s, %s::jsonb, %s"
        statement = f"INSERT INTO taskboard_jobs ({columns}) VALUES ({values}) RETURNING id"
        extra = () if max_attempts is None else (max_attempts,)

        async def op(conn: psycopg.AsyncConnection[Any]) -> list[int]:
            ids = []
            for kind, payload in rows:
                cur = await conn.execute(statement.encode(), (kind, payload, *extra))
                row = await cur.fetchone()
                assert row is not None
                ids.append(int(row[0]))
            return ids

        return await self._db.run(op)

    async def _install_poison_trigger(self, conn: psycopg.AsyncConnection[Any]) -> None:
        for statement in POISON_SETUP:
            await conn.execute(statement.encode())

    async def _feed(self, jobs: list[NewJob], seconds: float, faults_done: asyncio.Event) -> None:
        """Enqueue `jobs` at an even pace over `seconds` (a twentieth at once); if the faults
        outlast that estimate, keep feeding extra jobs at the same rate until they end, so
        no fault meets an idle fleet (and recovery is never judged on an empty queue)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        sent = 0
        while sent < len(jobs):
            progress = min(1.0, 0.05 + (loop.time() - start) / seconds)
            target = max(sent + 1, int(len(jobs) * progress))
            batch = jobs[sent:target]
            await self._enqueue(batch, self._feeder_db)
            sent += len(batch)
            await asyncio.sleep(0.1)
        # Extra jobs from their own RNG: how many depends on timing, the seeded ones do not.
        extra_rng = random.Random(self.config.seed ^ 0x5EED)
        per_tick = max(1, round(len(jobs) / seconds * 0.1))
        number = self.config.jobs + 1
        while not faults_done.is_set():
            await self._enqueue(make_jobs(self.config, extra_rng, per_tick, number),
                                self._feeder_db)
            number += per_tick
            await asyncio.sleep(0.1)

    async def _enqueue(self, jobs: list[NewJob], db: _Db | None = None) -> None:
        if not jobs:
            return
        registry = builtin_registry()

        async def op(conn: psycopg.AsyncConnection[Any]) -> list[int]:
            return await enqueue_many(conn, registry, jobs)

        # A batch whose commit was cut off may be enqueued twice: extra jobs, none lost.
        async with self.enqueue_lock:
            self.seen.enqueued_ids += await (db or self._db).run(op)

    async def _settle(self) -> None:
        """Wait (with a deadline) until no job is pending or claimed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.settle_timeout
        while loop.time() < deadline:
            rows = await self._db.fetch(
                "SELECT count(*) FROM taskboard_jobs"
                " WHERE completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL"
                " AND kind = ANY(%s)",
                (KNOWN_KINDS,),
            )
            if rows[0][0] == 0:
                return
            await asyncio.sleep(0.2)
        # Which jobs, and where each stands: what a stuck one waits for is the diagnosis.
        left = await self._db.fetch(
            "SELECT id, kind, attempts, max_attempts, claimed_by, lease_expires_at - now(),"
            " run_at - now(), waiting_on, snoozes FROM taskboard_jobs"
            " WHERE completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL"
            " AND kind = ANY(%s) ORDER BY id LIMIT 5",
            (KNOWN_KINDS,),
        )
        self.fault_log.append(
            f"queue not drained after {self.config.settle_timeout:g}s: "
            + "; ".join(
                f"job {r[0]} {r[1]} attempts {r[2]}/{r[3]} held by {r[4]} lease left {r[5]}"
                f" due in {r[6]} waiting_on {r[7]} snoozes {r[8]}" for r in left
            )
        )

    async def _await_recovery(self) -> None:
        """Feed small jobs until every worker that lived through a restart or a freeze
        completed one after it (the checker judges how long that took)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.recovery_timeout
        while self.seen.outages and loop.time() < deadline:
            missing = set()
            for restart in self.seen.outages:
                rows = await self._db.fetch(
                    "SELECT DISTINCT worker_id FROM taskboard_attempts"
                    " WHERE outcome = 'completed' AND ended_at > %s",
                    (restart.back_at,),
                )
                done = {r[0] for r in rows}
                missing |= {w for w in restart.workers if w not in done and self.procs[w].usable}
            if not missing:
                return
            rows = await self._db.fetch(
                "SELECT count(*) FROM taskboard_jobs WHERE lease_token IS NULL"
                " AND completed_at IS NULL AND failed_at IS NULL AND run_at <= now()"
            )
            if rows[0][0] < self.config.pool_size:  # keep a little work on offer
                probe = NewJob("sleep", {"seconds": 0.05}, max_attempts=self.config.max_attempts)
                await self._enqueue([probe] * (self.config.pool_size * len(missing)))
            await asyncio.sleep(0.1)

    # --- workers -------------------------------------------------------------------------

    def _spawn(self) -> WorkerProc:
        cfg = self.config
        worker_id = f"fw{self._next_worker}"
        self._next_worker += 1
        log_path = self.workdir / f"{worker_id}.log"
        popen = spawn_worker(
            self.url if self.proxy is None else self.proxy.url(self.url),
            worker_id,
            log_path,
            lease=cfg.lease,
            pool_size=cfg.pool_size,
            poll=cfg.poll,
            retry_base=cfg.retry_base,
            drain_timeout=cfg.drain_timeout,
            env={
                "TASKBOARD_SMTP_URL": f"smtp://{self.sink.host}:{self.sink.port}",
                "TASKBOARD_STRIPE_API_BASE": self.stripe.base_url,
            },
        )
        proc = WorkerProc(worker_id, popen, log_path)
        self.procs[worker_id] = proc
        self.seen.log_paths[worker_id] = log_path
        return proc

    async def _wait_registered(self, ids: list[str], timeout: float = 30.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            rows = await self._db.fetch(
                "SELECT count(*) FROM taskboard_workers WHERE id = ANY(%s) AND state = 'running'",
                (ids,),
            )
            if rows[0][0] == len(ids):
                return
            dead = [i for i in ids if not self.procs[i].alive]
            if dead or loop.time() > deadline:
                tails = {i: self.procs[i].log_path.read_text(errors="replace")[-1500:] for i in ids}
                raise RuntimeError(f"workers {ids} did not start: {tails}")
            await asyncio.sleep(0.05)

    def _note_deaths(self) -> None:
        for proc in self.procs.values():
            code = proc.popen.poll()
            if code is not None and not proc.killed and proc.id not in self.seen.exit_codes:
                self.seen.unexpected_exits[proc.id] = code

    async def _stop_workers(self) -> None:
        survivors = [p for p in self.procs.values() if p.alive and not p.killed]
        self.seen.survivors = frozenset(p.id for p in survivors)
        for proc in survivors:
            proc.popen.send_signal(signal.SIGTERM)
        for proc in survivors:
            try:
                code = await asyncio.to_thread(proc.popen.wait, 30)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                code = None
            self.seen.exit_codes[proc.id] = code

    async def _holder(self, kinds: Sequence[str], timeout: float = 3.0) -> WorkerProc | None:
        """A usable worker holding a live lease on a job of one of `kinds` (seeded pick)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            rows = await self._db.fetch(
                "SELECT DISTINCT claimed_by FROM taskboard_jobs WHERE lease_token IS NOT NULL"
                " AND lease_expires_at > now() AND kind = ANY(%s)",
                (list(kinds),),
            )
            holders = sorted(
                r[0] for r in rows if r[0] in self.procs and self.procs[r[0]].usable
            )
            if holders:
                return self.procs[self.rng.choice(holders)]
            if loop.time() > deadline:
                return None
            await asyncio.sleep(0.02)

    def _any_worker(self) -> WorkerProc:
        usable = sorted(p.id for p in self.procs.values() if p.usable)
        return self.procs[self.rng.choice(usable)]

    # --- faults --------------------------------------------------------------------------

    async def _apply_plan(self) -> None:
        loop = asyncio.get_running_loop()
        for fault in self.plan:
            await asyncio.sleep(fault.gap)
            self._note_deaths()
            if fault.kind in ("cut", "restart"):
                # A worker still starting exits (code 2, by the CLI's contract) when its
                # first connection fails; these faults are about running workers.
                await self._wait_registered([p.id for p in self.procs.values() if p.usable])
            at = loop.time() - self._started
            if fault.kind in NEW_FAULTS:
                detail = await NEW_FAULTS[fault.kind](self, fault)
            else:
                detail = await getattr(self, f"_fault_{fault.kind}")(fault)
            self.seen.faults[fault.kind] += 1
            self.fault_log.append(f"t={at:.1f}s {fault.kind}/{fault.variant}: {detail}")

    async def _fault_stall(self, fault: PlannedFault) -> str:
        # A worker holding sleep jobs: their handlers finish during the stall, so on SIGCONT
        # they race the renewal that would tell them the leases are gone, and some of
        # their completions meet the fence.
        proc = await self._holder(["sleep"]) or self._any_worker()
        proc.stopped = True
        start = _now()
        proc.popen.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            proc.popen.send_signal(signal.SIGCONT)
            proc.stopped = False
            self.seen.windows.append(Window("stall", proc.id, start, _now()))
        return f"{proc.id} stopped {fault.seconds:.1f}s"

    async def _fault_kill(self, fault: PlannedFault) -> str:
        where = {"handler": "sleep", "email": "email", "billing": "billing"}[fault.variant]
        slow = self.config.lease * 0.8
        if fault.variant == "email":
            self.sink.set_latency(slow)  # the worker is waiting for the DATA reply
        elif fault.variant == "billing":
            self.stripe.set_latency(slow)  # the worker is waiting for Stripe
        try:
            proc = await self._holder([where])
            if proc is not None and fault.variant != "handler":
                await asyncio.sleep(self.rng.uniform(0.05, slow / 2))
            if proc is None or not proc.usable:
                proc, where = self._any_worker(), "anything"
            self.seen.killed[proc.id] = await self._db.now()
            self.seen.windows.append(Window("kill", proc.id, _now(), _now()))
            proc.killed = True
            proc.popen.kill()
            await asyncio.to_thread(proc.popen.wait, 10)
        finally:
            self.sink.set_latency(0)
            self.stripe.set_latency(0)
        replacement = self._spawn()  # it registers while the run goes on
        return f"{proc.id} killed holding {where}; replaced by {replacement.id}"

    async def _fault_cut(self, fault: PlannedFault) -> str:
        proc = self._any_worker()

        async def cut(conn: psycopg.AsyncConnection[Any]) -> int:
            return await terminate_backends(conn, proc.id)

        return f"{proc.id}: {await self._db.run(cut)} backends terminated"

    async def _fault_restart(self, fault: PlannedFault) -> str:
        assert self.restart is not None
        running = frozenset(p.id for p in self.procs.values() if p.usable)
        start = _now()
        await asyncio.to_thread(self.restart)
        back = await self._db.now()
        self.seen.outages.append(Outage("restart", back, running))
        self.seen.windows.append(Window("restart", None, start, _now()))
        return f"server restarted, back at {back:%H:%M:%S.%f}"

    async def _fault_freeze(self, fault: PlannedFault) -> str:
        assert self.freeze is not None
        running = frozenset(p.id for p in self.procs.values() if p.usable)
        start = _now()
        await asyncio.to_thread(self.freeze, fault.seconds)
        back = await self._db.now()
        self.seen.outages.append(Outage("freeze", back, running))
        self.seen.windows.append(Window("freeze", None, start, _now()))
        return f"server frozen (SIGSTOP) for {fault.seconds:.1f}s"

    async def _fault_readonly(self, fault: PlannedFault) -> str:
        # Its own session, writable whatever the server's default becomes, to turn it back.
        async with await psycopg.AsyncConnection.connect(
            with_application_name(self.url, HARNESS_APP), autocommit=True
        ) as admin:
            start = _now()
            try:
                async with read_only_server(admin, self.url):
                    await asyncio.sleep(fault.seconds)
            finally:
                self.seen.windows.append(Window("readonly", None, start, _now()))
        return f"server read-only for {fault.seconds:.1f}s"

    async def _fault_lock(self, fault: PlannedFault) -> str:
        rows = await self._db.fetch(
            "SELECT id, claimed_by FROM taskboard_jobs WHERE lease_token IS NOT NULL"
            " AND lease_expires_at > now() AND claimed_by = ANY(%s) ORDER BY id",
            (sorted(p.id for p in self.procs.values() if p.usable),),
        )
        if not rows:
            return "no held job to lock"
        job_id, holder = rows[self.rng.randrange(len(rows))]
        async with await psycopg.AsyncConnection.connect(
            with_application_name(self.url, HARNESS_APP), autocommit=True
        ) as locker:
            start = _now()
            async with locker.transaction():
                await locker.execute(
                    "SELECT 1 FROM taskboard_jobs WHERE id = %s FOR UPDATE", (job_id,)
                )
                await asyncio.sleep(fault.seconds)
            self.seen.windows.append(Window("lock", holder, start, _now()))
        return f"job {job_id} (held by {holder}) row-locked for {fault.seconds:.1f}s"

    async def _fault_poison(self, fault: PlannedFault) -> str:
        async def insert(conn: psycopg.AsyncConnection[Any]) -> list[int]:
            ids = []
            for _ in range(fault.amount):
                if fault.variant == "overflow":
                    cur = await conn.execute(
                        "INSERT INTO taskboard_jobs (kind, payload, attempts, max_attempts)"
                        " VALUES ('noop', '{}', 2147483647, %s) RETURNING id",
                        (self.config.max_attempts,),
                    )
                else:
                    cur = await conn.execute(
                        "WITH j AS (INSERT INTO taskboard_jobs (kind, payload, max_attempts)"
                        " VALUES ('noop', '{}', %s) RETURNING id)"
                        " INSERT INTO taskboard_fault_poison SELECT id FROM j RETURNING id",
                        (self.config.max_attempts,),
                    )
                row = await cur.fetchone()
                assert row is not None
                ids.append(int(row[0]))
            return ids

        ids = await self._db.run(insert)
        self.seen.poison_ids += ids
        return f"{len(ids)} {fault.variant} poison row(s): {ids}"

    async def _fault_drain(self, fault: PlannedFault) -> str:
        self.sink.set_latency(fault.seconds)  # longer than the workers' drain timeout
        try:
            proc = await self._holder(["email"])
            if proc is None:
                return "no worker held an email job"
            await asyncio.sleep(self.rng.uniform(0.05, 0.2))  # the send is under way
            if not proc.usable:
                return f"{proc.id} went away before the drain"
            proc.drained = True
            start = _now()
            proc.popen.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.to_thread(proc.popen.wait, self.config.lease * 4 + 10)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                code = None
            self.seen.exit_codes[proc.id] = code
            self.seen.windows.append(Window("drain", proc.id, start, _now()))
        finally:
            self.sink.set_latency(0)
        replacement = self._spawn()
        return (
            f"{proc.id} drained while sending ({fault.seconds:.1f}s SMTP), exit {code}; "
            f"replaced by {replacement.id}"
        )

    async def _sample(self) -> None:
        """The queue and the fleet's rows, four times a second, for the silence check."""
        while True:
            try:
                rows = await self._sampler_db.fetch(SAMPLE_QUERY, (KNOWN_KINDS,))
            except psycopg.Error:
                await asyncio.sleep(SAMPLE_SECONDS)
                continue
            ready, workers = rows[0]
            self.seen.samples.append(Sample(_now(), int(ready), {
                worker: (float(age), int(in_flight), int(capacity), str(state))
                for worker, (age, in_flight, capacity, state) in (workers or {}).items()
            }))
            await asyncio.sleep(SAMPLE_SECONDS)

    async def _fault_smtp(self, fault: PlannedFault) -> str:
        if fault.variant == "451":
            self.sink.fail_next(fault.amount, code=451, message="4.3.0 Try again later")
            return f"next {fault.amount} messages refused with 451"
        if fault.variant == "550":
            self.sink.fail_next(1, code=550, message="5.1.1 Mailbox unavailable")
            return "next message refused with 550"
        if fault.variant == "slow":
            self.sink.set_latency(fault.seconds)
            try:
                await asyncio.sleep(fault.seconds)
            finally:
                self.sink.set_latency(0)
            return f"replies {fault.seconds:.1f}s late"
        self.sink.down = True
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            self.sink.down = False
        return f"down {fault.seconds:.1f}s"

    async def _fault_stripe(self, fault: PlannedFault) -> str:
        if fault.variant in ("500", "429"):
            self.stripe.inject(fault.variant, fault.amount)  # type: ignore[arg-type]
            return f"next {fault.amount} requests answered {fault.variant}"
        if fault.variant == "decline":
            self.stripe.inject("decline")
            return "next confirmation declined"
        if fault.variant == "slow":
            self.stripe.inject("slow", seconds=fault.seconds)
            return f"next request {fault.seconds:.1f}s slow"
        self.stripe.set_latency(fault.seconds / 2)
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            self.stripe.set_latency(0)
        return f"every request {fault.seconds / 2:.2f}s late for {fault.seconds:.1f}s"


async def run_faults(
    db_url: str,
    config: FaultConfig,
    workdir: Path,
    *,
    restart: Callable[[], None] | None = None,
    freeze: Callable[[float], None] | None = None,
    echo: Callable[[str], None] | None = None,
    replication: Replication | None = None,
) -> Report:
    """One complete fault run; returns the checker's report. With `replication`, `db_url`
    is its cluster's URL and the plan may fail over (tests/faults/failover.py)."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    async with FaultHarness(
        db_url, config, workdir, restart=restart, freeze=freeze, echo=echo,
        replication=replication,
    ) as harness:
        report = await harness.run()
    return report


EXTERNAL_FILE = "external.jsonl"


def keep_external(path: Path, seen: Observed) -> None:
    """What the sink and the Stripe endpoint saw, one JSON object a line, beside the worker
    logs: they live in this process only, and a kept soak is read again later
    (bench/soak_duplicates.py counts duplicate effects per reclaim from it)."""
    with path.open("w", encoding="utf-8") as out:
        for m in seen.messages:
            stamp = m.stamp
            out.write(json.dumps({
                "source": "smtp", "message_id": m.message_id, "job": stamp.job,
                "attempt": stamp.attempt, "recipients": len(m.recipients),
                "received_at": m.received_at.isoformat()}) + "\n")
        for r in seen.stripe_requests:
            out.write(json.dumps({
                "source": "stripe", "method": r.method, "path": r.path, "status": r.status,
                "idempotency_key": r.idempotency_key, "replayed": r.replayed, "job": r.job,
                "attempt": r.attempt, "arrived_at": r.arrived_at.isoformat()}) + "\n")
        for c in seen.charges:
            out.write(json.dumps({"source": "charge", **c.as_json()}) + "\n")
