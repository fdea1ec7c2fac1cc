"""`taskboard worker`: a headless worker with JSON logs, drained by SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
from typing import TYPE_CHECKING

import psycopg
from taskboard.core.base.errors import ConfigError, DatabaseUnavailable
from taskboard.core.base.secrets import scrub
from taskboard.core.engine.connection import answered
from taskboard.core.engine.db_errors import (
    AnswerTimeout,
    describe,
    is_transient,
    refused_for_good,
)
from taskboard.core.engine.events import EventBus
from taskboard.core.engine.pooler import refuse_transaction_pooling
from taskboard.core.engine.registration import check_connection_budget
from taskboard.core.engine.schema import SCHEMA_VERSION, migrate, schema_version
from taskboard.core.engine.settings import WorkerSettings, default_worker_id
from taskboard.core.kinds import KindRegistry
from taskboard.core.runtime import event_loop, logs
from taskboard.core.runtime.db import Database, connection
from taskboard.core.runtime.log_summary import JobSummary

if TYPE_CHECKING:
    from taskboard.core.engine.worker import Worker

EXIT_OK = 0
# The worker drained and stopped itself because an unexpected error persisted for longer
# than a lease: a process supervisor should start it again.
EXIT_UNHEALTHY = 4
# The database could not be reached, or did not answer, for a lease at start; or, with
# `--burst`, for a lease while running (a batch run ends instead of retrying for ever; a
# long-running worker waits for the database to come back).
EXIT_UNREACHABLE = 5
# The first wait between start-up checks; doubled up to the second.
PREFLIGHT_FIRST_DELAY = 0.2
PREFLIGHT_MAX_DELAY = 2.0

log = logging.getLogger("taskboard.cli")


def worker_settings(args: argparse.Namespace) -> WorkerSettings:
    """Settings from the flags; out-of-range values raise `ConfigError` (exit 2)."""
    optional = {
        "keep_completed_seconds": args.keep_completed,
        "keep_dead_seconds": args.keep_dead,
        "keep_cancelled_seconds": args.keep_cancelled,
        "prune_every_seconds": args.prune_every,
        "max_snoozes": args.max_snoozes,
    }
    return WorkerSettings(
        burst=args.burst,
        **{name: value for name, value in optional.items() if value is not None},
        lease_seconds=args.lease,
        renew_every=args.renew_every,
        pool_size=args.pool_size,
        concurrency=args.concurrency,
        queues=tuple(args.queues or ["default"]),
        poll_seconds=args.poll,
        drain_seconds=args.drain_timeout,
        retry_base_seconds=args.retry_base,
        retry_max_seconds=args.retry_max,
        worker_id=args.worker_id or default_worker_id(),
    )


class StopRequest:
    """SIGINT/SIGTERM: drains the worker, or, before there is one, makes it drain at once."""

    def __init__(self) -> None:
        self._requested = False
        self._asked = asyncio.Event()
        self._worker: Worker | None = None

    def request(self) -> None:
        self._requested = True
        self._asked.set()
        if self._worker is not None:
            self._worker.drain()

    @property
    def requested(self) -> bool:
        return self._requested

    async def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less if a stop is requested meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._asked.wait(), seconds)

    def follow(self, worker: Worker) -> None:
        self._worker = worker
        if self._requested:
            worker.drain()


async def run_worker(
    db: Database, settings: WorkerSettings, args: argparse.Namespace, registry: KindRegistry
) -> int:
    """Run one worker until it is drained; the exit code."""
    logs.configure(args.log_format, getattr(logging, args.log_level.upper()))
    # Handled from the start: a supervisor's SIGTERM may come while the stand-ins or the
    # pool are still starting, and must end the process cleanly (exit 0), not kill it.
    stop = StopRequest()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Not on Windows' loops, and not off the main thread (`main` called from another).
        with contextlib.suppress(NotImplementedError, ValueError):
            loop.add_signal_handler(sig, stop.request)
    bus = EventBus()
    event_log = logs.EventLogger(every_job=args.log_every_job)
    # A logger that would drop every routine claim and completion is not sent them: the
    # engine then does not build them at all (two events per job).
    bus.subscribe(event_log, every_job=event_log.wants_every_job)
    server = None
    if args.metrics_port is not None:
        # Imported here: prometheus_client costs every other command a tenth of a second.
        from taskboard.core.runtime.metrics import Metrics, serve_metrics

        metrics = Metrics(db.url)
        bus.subscribe(metrics)
        server = serve_metrics(metrics, args.metrics_port, args.metrics_host)
        log.info("metrics", extra={"fields": {"msg": "serving Prometheus metrics",
                                              "url": server.url}})
    try:
        if not await preflight(db, settings, stop):
            return EXIT_OK  # stopped by a signal before it started
        return await _run(db, settings, bus, stop, registry, args.log_summary)
    finally:
        if server is not None:
            await asyncio.to_thread(server.close)


async def preflight(db: Database, settings: WorkerSettings, stop: StopRequest) -> bool:
    """Before anything starts: a pool the server has no room for is refused, so is a
    transaction pooler (before the stand-ins take their registry lock, a session's, which
    such a pooler would leave held on a server connection), and the schema is brought up
    to date. False if a signal asked the process to stop meanwhile.

    A database that cannot be reached or does not answer is waited out for a lease from the
    first failure, as the running worker does: a replacement worker started during a
    failover (the old primary killed or frozen, the standby not yet promoted) met that and
    exited 2, "bad usage", and a supervisor that takes 2 for a configuration error stops
    restarting. Past a lease the `DatabaseUnavailable` ends the command with 5. Every
    statement here but a migration's has an answer limit: a connection that goes silent (a
    flow a NAT or proxy forgot; keepalives do not notice one whose packets are still
    acknowledged) is closed and the next try opens another, instead of a worker that waits
    on it for ever, silent, before it ever starts. Errors that are not the database's
    state (no room for the pool, a pooler, a newer schema, no privilege, a server refusing
    the session for good: no such database or role, a wrong password) end it at once (2).
    """
    loop = asyncio.get_running_loop()
    give_up: float | None = None  # a lease after the first failure
    delay = PREFLIGHT_FIRST_DELAY
    limit = settings.startup_answer_timeout
    while not stop.requested:
        try:
            async with connection(db.url) as conn:
                await answered(conn, check_connection_budget(conn, settings.pool_size), limit,
                               "room for the pool")
                await refuse_transaction_pooling(conn, db.url)
                version = await answered(conn, schema_version(conn), limit, "schema version")
                if version != SCHEMA_VERSION:
                    # No answer limit: DDL on a large table may take minutes, and a limit
                    # would turn a slow migration into one retried for ever.
                    await migrate(conn)
            return True
        except (DatabaseUnavailable, AnswerTimeout, psycopg.Error) as exc:
            if isinstance(exc, AnswerTimeout):
                problem = f"database not answering: {exc}"
            elif isinstance(exc, psycopg.Error):
                if not is_transient(exc):
                    raise
                problem = f"database unavailable: {scrub(describe(exc))}"
            else:
                problem = str(exc)  # already masked and on one line
                if refused_for_good(problem):
                    # No such database or role, a wrong password: the settings, not the
                    # database's state (2, not 5).
                    raise ConfigError(problem) from None
            # The lease counts from the first failure: an attempt that hung until its
            # answer limit (a connection gone silent) leaves the next, on a fresh
            # connection, the whole lease.
            now = loop.time()
            give_up = now + settings.lease_seconds if give_up is None else give_up
            if now + delay > give_up:
                raise DatabaseUnavailable(
                    f"{problem} (waited {settings.lease_seconds:g}s, a lease)"
                ) from None
            log.warning("database not ready", extra={"fields": {
                "msg": "cannot start yet; retrying for up to a lease",
                "worker": settings.worker_id, "error": problem,
                "retry_in": round(delay, 1)}})
            await stop.wait(delay)
            delay = min(2 * delay, PREFLIGHT_MAX_DELAY)
    return False


async def _freeze(worker: Worker) -> None:
    """Once the worker has started, take what is alive out of the collector's reach.

    What is alive then (modules, the stand-ins, the pool, the registry) lives as long as the
    process. Frozen, it leaves the collector's generations, so the full collections that
    per-job garbage sets off no longer walk all of it (bench/cli_worker_cost.py: 0.032 ->
    0.027 ms of worker CPU per no-op job). This process is the command's own, so the choice
    is its to make; the engine, a library, leaves it to whoever owns the process.
    """
    while True:
        try:
            await worker.wait_started()
            break
        except TimeoutError:
            continue  # still waiting for its database: keep waiting, the run decides
    gc.freeze()


async def _run(
    db: Database, settings: WorkerSettings, bus: EventBus, stop: StopRequest,
    registry: KindRegistry, summary_seconds: float,
) -> int:
    # Imported here: the engine and the stand-ins (aiohttp) are about half of the start-up
    # time of every other command, which needs neither.
    from taskboard.core.engine.worker import ExitReason, Worker
    from taskboard.core.standins.runtime import local_runtime

    if db.embedded is not None:
        log.info("embedded PostgreSQL", extra={"fields": {"data_dir": str(db.embedded.data_dir)}})
    async with local_runtime(os.environ, database_url=db.url) as runtime:
        services = runtime.services
        log.info(
            "worker starting",
            extra={
                "fields": {
                    "worker": settings.worker_id,
                    "database": db.masked,
                    "lease": settings.lease_seconds,
                    "pool": settings.pool_size,
                    "capacity": settings.capacity,
                    "connection_slots": settings.connection_slots,
                    "services": services.describe(),
                    "loop": event_loop.running(),
                    "kinds": registry.runnable(),
                }
            },
        )
        # The callable, not the value: if the process whose stand-ins this one shares
        # exits, the runtime takes over and the next attempt sends to the new address.
        worker = Worker(
            db.url,
            registry=registry,
            settings=settings,
            services=runtime.current_services,
            bus=bus,
        )
        stop.follow(worker)
        summary = JobSummary(worker.id, lambda: worker.counters, summary_seconds)
        helpers = [asyncio.create_task(summary.run()), asyncio.create_task(_freeze(worker))]
        try:
            reason = await worker.run()
        finally:
            for helper in helpers:
                helper.cancel()
            summary.last()
    if reason is ExitReason.UNHEALTHY:
        log.error(
            "worker stopped: unhealthy",
            extra={"fields": {"msg": "worker stopped: unhealthy", "worker": worker.id,
                              "error": worker.last_error, "exit_code": EXIT_UNHEALTHY}},
        )
        return EXIT_UNHEALTHY
    if reason is ExitReason.UNREACHABLE:
        log.error(
            "worker stopped: database unreachable",
            extra={"fields": {"msg": "worker stopped: database unreachable",
                              "worker": worker.id, "error": worker.last_error,
                              "exit_code": EXIT_UNREACHABLE}},
        )
        return EXIT_UNREACHABLE
    return EXIT_OK
