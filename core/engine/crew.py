"""The crew: one worker's roles, wired together, and the life of each flight.

Built by `Worker.run` once the pool is open and the worker registered. Each role gets only
the collaborators it needs; none reaches into another's private state.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core.base import tracing_attempts
from taskboard.core.engine.completer import Completer
from taskboard.core.engine.connection import HeldConnection, session_params
from taskboard.core.engine.controller import Controller, Requests
from taskboard.core.engine.effect_log import EFFECT_RECORDS, EffectLog
from taskboard.core.engine.executor import Executor
from taskboard.core.engine.flights import Flight, Stop
from taskboard.core.engine.janitor import JANITOR, Janitor
from taskboard.core.engine.lease_keeper import DEADLINES, RENEWALS, LeaseKeeper
from taskboard.core.engine.outcomes import OutcomeKind, Reporter
from taskboard.core.engine.producer import CLAIMS, Producer
from taskboard.core.engine.read_only import server_state
from taskboard.core.engine.scheduler import SCHEDULER, Scheduler
from taskboard.core.engine.steps import StepLog
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.engine.worker_parts import WorkerParts
from taskboard.core.engine.worker_pool import Borrowed, worker_conninfo

log = logging.getLogger("taskboard.worker")

STOP_WAIT_SECONDS = 2.0
# A role's statement on a server that answers is cancelled within milliseconds.
ROLE_CANCEL_SECONDS = 0.5


class Crew:
    """The roles of one running worker."""

    def __init__(
        self,
        worker: WorkerParts,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        installation_id: str,
        *,
        on_unhealthy: Callable[[str, str], None],
        on_unreachable: Callable[[str, str], None] | None = None,
    ) -> None:
        s = worker.settings
        emit = worker.bus.emit
        timeouts = session_params(s.statement_timeout, s.lock_timeout)
        # A statement with no answer on one connection: drop the idle others too.
        dead = worker.pool_check.casualty if worker.pool_check is not None else None
        self.engine = HeldConnection(
            pool, role="engine", session_params=timeouts, answer_timeout=s.answer_timeout,
            on_dead=dead,
        )
        # The second engine connection: grouped completions only (see Completer).
        self.second = (
            HeldConnection(
                pool, role="engine", session_params=timeouts,
                answer_timeout=s.answer_timeout, on_dead=dead,
            )
            if s.engine_connection_count > 1 else None
        )
        self.control_conn = HeldConnection(
            pool, role="control", session_params=timeouts, answer_timeout=s.answer_timeout,
            on_dead=dead,
        )
        if worker.pool_check is not None:
            worker.pool_check.listeners[:] = [
                held.suspect for held in self._held() if held is not None
            ]
        self.flights = worker.flights
        self.supervisor = Supervisor(
            worker.id,
            unhealthy_after=s.lease_seconds,
            answer_timeout=s.answer_timeout,
            probe=functools.partial(
                server_state, worker_conninfo(worker.url, worker.id), s.startup_answer_timeout
            ),
            retry_cap=s.retry_delay_cap,
            on_unhealthy=on_unhealthy,
            emit=emit,
            # A burst run is a batch: a database gone for a lease ends it (exit 5).
            unreachable_after=s.lease_seconds if s.burst else None,
            on_unreachable=on_unreachable,
        )
        self.reporter = Reporter(worker.id, worker.counters, self.engine, worker.bus)
        self.keeper = LeaseKeeper(
            worker_id=worker.id, settings=s, flights=self.flights, gate=worker.gate,
            engine=self.engine, supervisor=self.supervisor, counters=worker.counters, emit=emit,
        )
        self.producer = Producer(
            worker_id=worker.id, settings=s, registry=worker.registry, flights=self.flights,
            gate=worker.gate, engine=self.engine, supervisor=self.supervisor, keeper=self.keeper,
            counters=worker.counters, start=self._start_flight, bus=worker.bus,
            on_empty=worker.drain if s.burst else None,
        )
        self.completer = Completer(
            settings=s, flights=self.flights, gate=worker.gate,
            engine=self.engine, supervisor=self.supervisor, refill=self.producer,
            reporter=self.reporter, worker_id=worker.id, second=self.second,
        )
        self.effects = EffectLog(
            worker_id=worker.id, engine=self.engine, supervisor=self.supervisor
        )
        self.executor = Executor(
            registry=worker.registry, pool=pool, gate=worker.gate, completer=self.completer,
            services=worker.services, installation_id=lambda: installation_id,
            worker_id=worker.id, emit=emit, recorder=self.effects.record,
            steps=StepLog(worker.id, self.engine, emit),
            lease_seconds=s.lease_seconds,
            answer_timeout=s.answer_timeout,
        )
        # Housekeeping borrows pool connections: never stuck in front of a renewal.
        housekeeping = Borrowed(
            pool, session_params=timeouts, answer_timeout=s.answer_timeout, on_dead=dead
        )
        self.scheduler = Scheduler(
            worker_id=worker.id, kinds=self.producer.kinds, connection=housekeeping,
            supervisor=self.supervisor, retry_cap=s.retry_delay_cap, registry=worker.registry,
        )
        self.janitor = Janitor(
            worker_id=worker.id, settings=s, connection=housekeeping, supervisor=self.supervisor
        )
        self.controller = Controller(
            worker_id=worker.id, connection=self.control_conn,
            heartbeat_seconds=s.heartbeat_seconds, retry_cap=s.retry_delay_cap,
            supervisor=self.supervisor, status=worker.heartbeat_fields,
            on_requests=lambda r: worker.on_requests(r.pause, r.drain),
            on_jobs=self.producer.wake,
            on_cancel=self.cancel_token,
        )

    def start(self) -> None:
        """Spawn every role under the supervisor."""
        spawn = self.supervisor.spawn
        spawn("control", self.controller.run)
        spawn(RENEWALS, self.keeper.renewals)
        spawn(DEADLINES, self.keeper.deadlines)
        spawn(CLAIMS, self.producer.run)
        spawn("completions", self.completer.run)
        spawn(SCHEDULER, self.scheduler.run)
        spawn(JANITOR, self.janitor.run)
        spawn(EFFECT_RECORDS, self.effects.run)

    # --- flights -------------------------------------------------------------------------

    def cancel_token(self, token: str) -> None:
        """An operator cancelled the job this token holds, if this worker holds it."""
        for flight in self.flights:
            if str(flight.job.token) == token:
                self.keeper.stop_cancelled(flight)

    def _start_flight(self, flight: Flight) -> None:
        flight.task = asyncio.get_running_loop().create_task(
            self._run_flight(flight), name=f"job-{flight.job.id}"
        )

    async def _run_flight(self, flight: Flight) -> None:
        outcome = None
        try:
            outcome = await self.executor.run(flight)
            if outcome is not None:
                await self.reporter.report([outcome])
                if outcome.kind is not OutcomeKind.COMPLETED:
                    # The job is due again at a new time (a retry, a snooze, a release):
                    # the producer's timer, set while we held it, is stale.
                    self.producer.wake()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Nothing dies unseen: the attempt is abandoned (its lease expires and another
            # worker runs the job), and this says why.
            log.exception(
                "job %s: attempt abandoned after an unexpected error", flight.job.id,
                extra={"fields": {"msg": "attempt abandoned after an unexpected error",
                                  "job_id": flight.job.id, "token": str(flight.job.token)}},
            )
        finally:
            # A drain that stopped this handler keeps the flight until it released it.
            if outcome is not None or flight.stop is not Stop.DRAIN:
                self.flights.remove(flight)
                tracing_attempts.attempt_abandoned(flight, "ended with no outcome reported")

    # --- stopping ------------------------------------------------------------------------

    def cancel_all(self) -> None:
        """Crash: cancel every role and every handler; nothing is written."""
        for task in self.supervisor.tasks:
            task.cancel()
        for flight in self.flights:
            if flight.task is not None:
                flight.task.cancel()

    async def stop(self, *, keep_leases: bool) -> None:
        """Cancel the roles and whatever still runs (its leases expire on their own)."""
        roles = self.supervisor.tasks
        for task in roles:
            task.cancel()
        # A role cancelled in a statement the server does not answer (a stopped backend, a
        # frozen server) is in psycopg's cancel of it: up to 5 s to send the cancel and 5 s
        # more for the statement to end. Cancelled again, psycopg closes that connection
        # at once instead, which the stop does next anyway (tests/test_stop_in_outage.py).
        await asyncio.wait(roles, timeout=ROLE_CANCEL_SECONDS)
        for task in roles:
            if not task.done():
                task.cancel()
        await asyncio.gather(*roles, return_exceptions=True)
        stragglers = [f.task for f in self.flights if f.task is not None and not f.task.done()]
        for task in stragglers:
            task.cancel()
        if stragglers:
            await asyncio.wait(stragglers, timeout=STOP_WAIT_SECONDS)
        # Before the engine connection goes back: a record of an effect is never dropped.
        await self.effects.flush()

    async def close_connections(self) -> None:
        """Give the engine and control connections back to the pool."""
        # At once, not one after the other: each waits up to its limit on a silent server.
        await asyncio.gather(*(held.close() for held in self._held() if held is not None),
                             return_exceptions=True)

    def _held(self) -> tuple[HeldConnection | None, ...]:
        return (self.engine, self.second, self.control_conn)


__all__ = ["Crew", "Requests"]
