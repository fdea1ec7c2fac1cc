"""Supervision of a worker's roles: no loop ends unseen.

Each role (claims, completions, renewals, deadlines, control) runs under `Supervisor.spawn`.
A role waits out transient database errors itself and says so through `trouble()`; anything
else it does not expect escapes to the supervisor, which logs one JSON line naming the role,
the statement and the error, backs off and runs the role again. When an unexpected error
keeps coming back for longer than one lease, the worker is unhealthy: `on_unhealthy` is
called once with the role and the error (the worker records it in its row, says so on the
dashboard, and from the command line drains and exits non-zero so a process supervisor
restarts it).

Read-only errors are retried like transient ones (the connection is left, see
`read_only`), but they start a streak of the worker's own that only proof of a writable
server ends: a success of a role whose every success is a write (`WRITING_ROLES`; a read
succeeds on a read-only server, and some roles succeed without a statement). When no
writable server has been found for one lease, the worker is unhealthy in the same way, on
a timer rather than at the next error (a pool with nowhere to connect answers only after
its own timeout), after one more answer limit for the statements still out, and after a
fresh session through the URL (`probe`) found a read-only server: a statement on an open
connection that gets no answer, or a probe that gets none, ends the streak (the server
stopped answering: an outage, waited out as any other), and a probe that finds a writable
server gives the roles another lease to reach it. A timer that fires late, because the
process was stopped or frozen across the deadline, waits a lease more for the roles to
try again.

Transient trouble is logged once when a role meets it, then at most once a second per
worker, with the count of lines left out: an outage met by every role is one story, not
one line per retry.

A burst worker (`unreachable_after` set) also gives up on the database: when transient
errors (the database unreachable) keep coming for that long, `on_unreachable` is called once,
so a batch run ends with an error instead of retrying for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from taskboard.core.engine.db_errors import (
    AnswerTimeout,
    describe,
    is_read_only,
    is_transient,
    statement_of,
)
from taskboard.core.engine.events import Event, LeftReadOnlyServer
from taskboard.core.engine.read_only import ServerState

log = logging.getLogger("taskboard.worker")

FIRST_RETRY_SECONDS = 0.1
LOG_EVERY_SECONDS = 1.0  # transient trouble: at most one warning this often
# A read-only judgement due this share of a lease ago or earlier means the process was
# stalled in between (an asyncio timer is otherwise late by milliseconds).
STALL_SLACK = 0.25
# Roles that call `ok()` only after a statement that writes: the heartbeat (control), a
# claim, a grouped completion. Renewals with nothing held, the scheduler's reads and a
# janitor pass another worker is running succeed without writing anything.
WRITING_ROLES = frozenset({"control", "claims", "completions"})


class Supervisor:
    """Runs roles, restarts them after unexpected errors, and judges the worker's health."""

    def __init__(
        self,
        worker_id: str,
        *,
        unhealthy_after: float,
        retry_cap: float,
        on_unhealthy: Callable[[str, str], None],
        unreachable_after: float | None = None,
        on_unreachable: Callable[[str, str], None] | None = None,
        emit: Callable[[Event], None] | None = None,
        answer_timeout: float = 0.0,
        probe: Callable[[], Awaitable[ServerState]] | None = None,
    ) -> None:
        self.worker_id = worker_id
        # Asked before the verdict: is there a writable server, a read-only one, or none
        # answering (an outage: the pool reconnecting to a frozen server looks the same
        # from here as a URL with nowhere writable to go)?
        self._probe = probe
        # The longest a role waits for an answer: a read-only streak gets this much more
        # for statements still out to say whether the server stopped answering instead.
        self.answer_timeout = answer_timeout
        self.unhealthy_after = unhealthy_after
        self.retry_cap = retry_cap
        self._on_unhealthy = on_unhealthy
        self._emit = emit
        self._streaks: dict[str, float] = {}  # role -> when its current error streak began
        self.unreachable_after = unreachable_after
        self._on_unreachable = on_unreachable
        self._outages: dict[str, float] = {}  # role -> when its transient streak began
        self._reported = False
        self.last_error: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Since when no writable server has been seen, which role said so first, and how.
        self._read_only: tuple[float, str, str] | None = None
        self._read_only_timer: asyncio.TimerHandle | None = None
        self._quiet_until = float("-inf")
        self._left_out = 0  # transient warnings not written since the last one
        self._troubled: set[str] = set()  # roles that said they are in transient trouble

    def spawn(self, role: str, body: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run `body` as role `role` until it returns (the role was told to stop)."""
        task = asyncio.get_running_loop().create_task(self._run(role, body), name=role)
        self._tasks.append(task)
        return task

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The role tasks spawned so far, and the read-only probes (stopped with them)."""
        return list(self._tasks)

    async def _run(self, role: str, body: Callable[[], Awaitable[None]]) -> None:
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.trouble(role, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_cap)

    def trouble(
        self, role: str, exc: BaseException, *, action: str = "retrying", handled: bool = False
    ) -> None:
        """Log one line for an error of `role`, and count it towards unhealthy if unexpected.

        `handled`: the role already dealt with it (a row quarantined): a warning, no streak.
        """
        transient = is_transient(exc)
        now = asyncio.get_running_loop().time()
        fields: dict[str, object] = {
            "msg": "database unavailable" if transient else "unexpected error",
            "worker": self.worker_id,
            "role": role,
            "statement": statement_of(exc),
            "error": describe(exc),
            "action": action,
        }
        if is_read_only(exc):
            fields["msg"] = "read-only server"
            fields["action"] = "left it; reconnecting through the URL"
            if not self._reported:
                self.last_error = f"{role}: {describe(exc)} (left the read-only server)"
            if self._read_only is None:
                self._read_only = (now, role, describe(exc))
                self._judge_read_only_later(now)
                if self._emit is not None:
                    self._emit(LeftReadOnlyServer(self.worker_id, role, describe(exc)))
        elif isinstance(exc, AnswerTimeout) and exc.silent:
            # A server that stops answering after it refused writes (a switchover, then
            # a frozen host) is an outage from here on, waited out as any other; if it
            # comes back read-only, its next refusal starts a new streak.
            self._end_read_only()
        if handled:
            log.warning("%s: %s", role, fields["error"], extra={"fields": fields})
            return
        if transient:
            if self.unreachable_after is not None:
                self._outage(role, exc)
            # A role's first line of an outage is always written (which roles are stuck
            # is the story); its repeats share one line a second with the other roles'.
            if role in self._troubled and now < self._quiet_until:
                self._left_out += 1
                return
            self._troubled.add(role)
            self._quiet_until = now + LOG_EVERY_SECONDS
            if self._left_out:
                fields["left_out"] = self._left_out
                self._left_out = 0
            log.warning("%s: %s", role, fields["error"], extra={"fields": fields})
            return
        log.error("%s: %s", role, fields["error"], extra={"fields": fields})
        error = f"{role}: {describe(exc)}"
        if not self._reported:
            self.last_error = error
        began = self._streaks.setdefault(role, now)
        if now - began >= self.unhealthy_after:
            self._report(role, error)

    def _outage(self, role: str, exc: BaseException) -> None:
        now = asyncio.get_running_loop().time()
        began = self._outages.setdefault(role, now)
        assert self.unreachable_after is not None
        if now - began >= self.unreachable_after and not self._reported:
            self._reported = True
            self.last_error = f"{role}: {describe(exc)}"
            if self._on_unreachable is not None:
                self._on_unreachable(role, self.last_error)

    def ok(self, role: str) -> None:
        """`role` just succeeded: its error streak, if any, is over."""
        self._streaks.pop(role, None)
        self._outages.pop(role, None)
        self._troubled.discard(role)
        if role in WRITING_ROLES:
            self._end_read_only()

    def _end_read_only(self) -> None:
        self._read_only = None
        if self._read_only_timer is not None:
            self._read_only_timer.cancel()
            self._read_only_timer = None

    def _report(self, role: str, error: str) -> None:
        if not self._reported:
            self._reported = True
            self._on_unhealthy(role, error)

    def _judge_read_only_later(self, now: float, wait: float | None = None) -> None:
        due = now + (self.unhealthy_after if wait is None else wait)
        self._read_only_timer = asyncio.get_running_loop().call_at(
            due, self._judge_read_only, due, wait is not None
        )

    def _judge_read_only(self, due: float, last_look: bool) -> None:
        """One lease after the first read-only error, no write has succeeded since; then,
        statements still out answered or given up, the verdict."""
        self._read_only_timer = None
        if self._read_only is None or self._reported:
            return
        began, role, error = self._read_only
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - due > STALL_SLACK * self.unhealthy_after:
            # The timer is late: this process was not running (SIGSTOP, a frozen VM, a
            # blocked loop) for part of the lease, and its roles could not try a write
            # then. Time nobody looked is no evidence; give them a lease from now.
            self._judge_read_only_later(now)
            return
        if not last_look and self.answer_timeout > 0:
            self._judge_read_only_later(now, self.answer_timeout)
            return
        if self._probe is not None:
            self._tasks.append(loop.create_task(self._probe_then_judge(self._probe)))
            return
        self._no_writable_server(began, role, error)

    async def _probe_then_judge(self, probe: Callable[[], Awaitable[ServerState]]) -> None:
        state: ServerState | None
        try:
            state = await probe()
        except Exception as exc:
            # A probe that broke says nothing of the server; unjudged, the streak would
            # hold no timer and never be judged again.
            log.warning("read-only probe failed", extra={"fields": {
                "msg": "could not ask a fresh session; judging again a lease later",
                "worker": self.worker_id, "error": describe(exc)}})
            state = None
        if self._read_only is None or self._reported:
            return  # a write succeeded meanwhile, or the worker is unhealthy already
        began, role, error = self._read_only
        if state == "silent":
            self._end_read_only()  # nothing answers: an outage, waited out as any other
        elif state in ("writable", None):
            # The pool will get there (or the next look will tell): a lease more for the
            # roles to write.
            self._judge_read_only_later(asyncio.get_running_loop().time())
        else:
            self._no_writable_server(began, role, error)

    def _no_writable_server(self, began: float, role: str, error: str) -> None:
        waited = asyncio.get_running_loop().time() - began
        self.last_error = f"{role}: no writable server for {waited:.0f} s ({error})"
        log.error(
            "no writable server",
            extra={"fields": {"msg": "no writable server", "worker": self.worker_id,
                              "role": role, "seconds": round(waited, 1), "error": error}},
        )
        self._report(role, self.last_error)
