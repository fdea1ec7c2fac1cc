"""The dashboard flags what the outside world saw of jobs that did not complete, and finds
duplicate emails in the send records (any relay, any process), not only in its own sink."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from taskboard.core import sql
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import cancel, enqueue
from taskboard.core.view.board import EffectOfUncompleted, SendSeen
from taskboard.core.view.status import read_board
from taskboard.tui.widgets.effects import EffectsPanel

from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, at, main_board
from tests.tui.sample_scenes import LARGE

BILL = {"customer": "cus_maya", "amount": 1999, "currency": "usd"}
EMAIL = {"to": ["maya@example.com"], "subject": "Receipt", "text": "Thanks."}


async def test_the_board_reads_flags_and_duplicates_from_the_records(conn: Any) -> None:
    registry = builtin_registry()
    billed = await enqueue(conn, registry, "billing", BILL)
    mailed = await enqueue(conn, registry, "email", EMAIL)
    quiet = await enqueue(conn, registry, "billing", BILL)  # cancelled, nothing happened
    # What two workers' effect logs write: a charge by attempt 1, one message sent by two
    # attempts (the second after a reclaim), through a relay this process never sees.
    await conn.execute(sql.RECORD_CHARGE, {
        "job_id": billed, "payment_intent": "pi_1", "amount": 1999, "currency": "usd",
        "customer": "cus_maya", "attempt": 1, "worker_id": "a", "status": "succeeded"})
    for attempt, worker in ((1, "a"), (2, "b")):
        await conn.execute(sql.RECORD_SENDS, {
            "job_id": mailed, "attempt": attempt, "message_id": "<m1@x>", "worker_id": worker,
            "recipients": ["maya@example.com"]})
    for job_id in (billed, quiet):
        await cancel(conn, job_id)

    board = await read_board(conn, database="test", mode="attached")

    [flagged] = board.effects.uncompleted
    assert (flagged.job_id, flagged.kind, flagged.state, flagged.charges, flagged.sends) == (
        billed, "billing", "cancelled", 1, 0)
    [send] = board.effects.sends
    assert (send.message_id, send.job_id, send.attempts) == ("<m1@x>", mailed, 2)
    assert board.effects.duplicates == ("<m1@x>",)


async def test_the_effects_panel_flags_uncompleted_jobs_and_recorded_duplicates() -> None:
    board = main_board()
    effects = replace(
        board.effects,
        uncompleted=(EffectOfUncompleted(77, "billing", "cancelled", at(-20), 1, 0),),
        sends=(SendSeen(at(-10), "<job-99@relay>", "maya@example.com", 99, 2),),
    )
    async with running(FixedBoard(replace(board, effects=effects)), size=LARGE) as run:
        text = " ".join(str(run.app.query_one(EffectsPanel).render()).split())
    assert "1 NOT COMPLETED with effects #77 billing cancelled: charged" in text
    # One duplicate from this process's sink, one only the records know of.
    assert "2 DUPLICATE" in text and "<job-99@relay>" in text
