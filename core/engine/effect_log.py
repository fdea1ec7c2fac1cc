"""The effect log: records of what the outside world saw (a charge, a send), each committed
on its own as soon as the answer is in, never in the handler's transaction.

A handler's own writes commit with its fenced completion, so a cancelled, timed-out,
rejected or lost attempt rolls them back; a charge or a send cannot be rolled back, so its
record must not be either (DESIGN invariant 14). Written on the worker's engine connection
(autocommit, one short INSERT between its lease statements): a pool connection would break
the headroom rule — with every handler slot taken (pool - reserved billing jobs on Stripe)
the record would wait for a connection that only a finished handler frees, and email jobs
hold no connection at all.

A record that cannot be written (the database away, the engine connection being replaced, a
table locked) is kept in memory and written again by the `effect records` role until it is;
the job is never failed for it (the effect happened: failing would only make another attempt repeat
it). A worker that stops with records still unwritten logs each one in full at error level,
so an operator can enter it by hand: never dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, LiteralString

from taskboard.core import sql
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import describe
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.kinds.registry import ChargeEffect, EffectRecord, EffectTicket, SendEffect

log = logging.getLogger("taskboard.worker")

EFFECT_RECORDS = "effect records"
FIRST_TRIES = 3  # written at once, with short pauses, before the role takes it over
RETRY_SECONDS = 1.0
FLUSH_SECONDS = 5.0  # what a stopping worker gives its unwritten records


# By kind, so every statement is a constant (tests/faults/test_sql_safety.py checks it).
_STATEMENTS: dict[str, LiteralString] = {"charge": sql.RECORD_CHARGE, "send": sql.RECORD_SENDS}


@dataclass(frozen=True)
class _Unwritten:
    what: str  # "charge pi_..." / "send <...>", for the log
    kind: str  # a key of _STATEMENTS
    params: dict[str, Any]


class EffectLog:
    """One worker's effect records: written now, or kept and written again until they are."""

    def __init__(self, *, worker_id: str, engine: HeldConnection, supervisor: Supervisor) -> None:
        self._worker_id = worker_id
        self._engine = engine
        self._supervisor = supervisor
        self._pending: list[_Unwritten] = []
        self._writes: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()

    @property
    def unwritten(self) -> int:
        """Records waiting for the database."""
        return len(self._pending)

    async def record(self, ticket: EffectTicket, effect: EffectRecord) -> None:
        """Write `effect`'s record now (`EffectTicket.record`). Shielded: a handler stopped
        while it waits (a drain, a crash of the attempt) does not stop the write."""
        task = asyncio.get_running_loop().create_task(self._write_first(_unwritten(ticket, effect)))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        # Normally a few milliseconds. When the database does not answer, the handler waits
        # no longer than one statement may take and goes on: the write goes on without it
        # (and is kept and written again), while the attempt's lease keeps running.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), self._engine.answer_timeout)

    async def run(self) -> None:
        """The role: write the kept records again, oldest first, until the database takes
        them. Every error is retried (a revoked privilege or a locked table is an operator's
        to fix, and the record must still be kept); a record that fails goes to the back,
        so one that can never be written holds up no other. Unexpected errors count towards
        the worker's health like any role's, so a worker that cannot keep records for a
        lease says so and stops (logging what it holds)."""
        delay = RETRY_SECONDS
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                record = self._pending.pop(0)
                try:
                    await self._write(record)
                except Exception as exc:
                    self._pending.append(record)
                    self._supervisor.trouble(EFFECT_RECORDS, exc, action="kept, will write again")
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, self._supervisor.retry_cap)
                    continue
                delay = RETRY_SECONDS
                self._supervisor.ok(EFFECT_RECORDS)

    async def flush(self) -> None:
        """At stop: finish the writes under way and try the kept ones once more, for at most
        `FLUSH_SECONDS` in all; log in full whatever still could not be written."""
        loop = asyncio.get_running_loop()
        until = loop.time() + FLUSH_SECONDS
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=FLUSH_SECONDS)
        while self._pending:
            record = self._pending.pop(0)
            try:
                async with asyncio.timeout(max(0.1, until - loop.time())):
                    await self._write(record)
            except Exception as exc:
                self._give_up(record, exc)

    async def _write_first(self, record: _Unwritten) -> None:
        delay = 0.1
        for _ in range(FIRST_TRIES):
            try:
                await self._write(record)
                return
            except Exception as exc:
                self._supervisor.trouble(EFFECT_RECORDS, exc, action="kept, will write again")
            await asyncio.sleep(delay)
            delay *= 2
        self._pending.append(record)
        self._wake.set()

    async def _write(self, record: _Unwritten) -> None:
        async with self._engine.use(EFFECT_RECORDS) as conn:
            await conn.execute(_STATEMENTS[record.kind], record.params)

    def _give_up(self, record: _Unwritten, exc: BaseException) -> None:
        # No secrets in a record: ids, amounts, addresses the job's payload holds anyway.
        fields = {
            "msg": "effect record not written",
            "worker": self._worker_id,
            "effect": record.what,
            "record": record.params,
            "error": describe(exc),
        }
        log.error(
            "effect record not written: %s: %s",
            record.what,
            describe(exc),
            extra={"fields": fields},
        )


def _unwritten(ticket: EffectTicket, effect: EffectRecord) -> _Unwritten:
    common = {"job_id": ticket.job_id, "attempt": ticket.attempt, "worker_id": ticket.worker_id}
    if isinstance(effect, ChargeEffect):
        return _Unwritten(
            f"charge {effect.payment_intent}",
            "charge",
            common
            | {
                "payment_intent": effect.payment_intent,
                "amount": effect.amount,
                "currency": effect.currency,
                "customer": effect.customer,
                "status": effect.status,
            },
        )
    assert isinstance(effect, SendEffect)
    return _Unwritten(
        f"send {effect.message_id}",
        "send",
        common | {"message_id": effect.message_id, "recipients": list(effect.recipients)},
    )
