"""The checker itself: histories written by hand, each breaking one promise, must each be
reported; a clean history must not be. (A checker that never fails proves nothing.)"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from taskboard.core.standins.smtp_sink import ReceivedMessage
from taskboard.core.standins.stripe_endpoint import Charge

from tests.faults.checker import Observed, Outage, Sample, Window, check

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class History:
    """Jobs, attempts, billing rows, log lines and effects, written by hand."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], tmp: Path) -> None:
        self.conn = conn
        self.tmp = tmp
        self.logs: dict[str, list[dict[str, Any]]] = {"w1": [], "w2": []}
        self.messages: list[ReceivedMessage] = []
        self.charges: list[Charge] = []

    async def job(self, kind: str, state: str, *, error: str | None = None,
                  payload: dict[str, Any] | None = None) -> int:
        # No identity: keyed by its id, as a job from before migration 9 (the messages
        # and keys below say `job-{id}`).
        cur = await self.conn.execute(
            "INSERT INTO taskboard_jobs (kind, payload, attempts, completed_at, failed_at,"
            " last_error, identity) VALUES (%s, %s, 0, %s, %s, %s, NULL) RETURNING id",
            (kind, json.dumps(payload or {}), T0 if state == "completed" else None,
             T0 if state == "dead" else None, error),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def attempt(self, job_id: int, worker: str, outcome: str | None,
                      *, ended: datetime = T0) -> uuid.UUID:
        token = uuid.uuid4()
        await self.conn.execute(
            "UPDATE taskboard_jobs SET attempts = attempts + 1 WHERE id = %s", (job_id,)
        )
        await self.conn.execute(
            "INSERT INTO taskboard_attempts (job_id, attempt, lease_token, worker_id,"
            " claimed_at, ended_at, outcome)"
            " SELECT %s, attempts, %s, %s, %s, %s, %s FROM taskboard_jobs WHERE id = %s",
            (job_id, token, worker, ended - timedelta(seconds=1), ended, outcome, job_id),
        )
        return token

    def said(self, worker: str, event: str, job_id: int, token: uuid.UUID) -> None:
        self.logs[worker].append(
            {"level": "info", "event": event, "worker_id": worker, "job_id": job_id,
             "token": str(token)}
        )

    def email(self, job_id: int, attempt: int, *, late: float = -1.0) -> None:
        """A message from one attempt, started `late` seconds after that attempt's local
        deadline (negative: before it)."""
        message_id = f"<taskboard-job-{job_id}@taskboard.local>"
        deadline = (T0 - timedelta(seconds=late)).timestamp()
        self.messages.append(ReceivedMessage(
            received_at=T0, mail_from="a@example.com", recipients=("b@example.com",),
            subject="s", message_id=message_id,
            headers=(("Message-ID", message_id), ("X-Taskboard-Job", str(job_id)),
                     ("X-Taskboard-Attempt", str(attempt)),
                     ("X-Taskboard-Deadline", f"{deadline:.3f}")),
            size=1, started_at=T0))

    def charge(self, job_id: int, intent: str) -> None:
        self.charges.append(Charge(
            payment_intent=intent, amount=100, currency="usd", customer="cus_1",
            idempotency_key=f"taskboard-job-{job_id}-create", confirm_key=None,
            metadata={"taskboard_job": str(job_id)}, created=T0, replays=0))

    def observed(self, **extra: Any) -> Observed:
        paths = {}
        for worker, lines in self.logs.items():
            path = self.tmp / f"{worker}.log"
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
            paths[worker] = path
        extra.setdefault("samples", [Sample(T0, 0, {})])
        return Observed(seed=1, log_paths=paths, messages=self.messages, charges=self.charges,
                        survivors=frozenset(self.logs), exit_codes=dict.fromkeys(self.logs, 0),
                        faults=Counter(), **extra)


BILL = {"customer": "cus_1", "amount": 100, "currency": "usd"}


async def _clean(h: History) -> list[int]:
    """A history that keeps every promise: reclaims, a rejection, a duplicate email."""
    noop = await h.job("noop", "completed")
    t = await h.attempt(noop, "w1", "completion_rejected")
    h.said("w1", "completion_rejected", noop, t)
    t = await h.attempt(noop, "w2", "completed")
    h.said("w2", "completed", noop, t)
    email = await h.job("email", "completed")
    await h.attempt(email, "w1", "lease_lost")
    await h.attempt(email, "w2", "completed")
    h.email(email, 1, late=2.0)  # late, but w1 was SIGSTOPped across it: excused
    h.email(email, 2)
    bill = await h.job("billing", "completed", payload=BILL)
    await h.attempt(bill, "w1", "lease_lost")
    await h.attempt(bill, "w2", "completed", ended=T0 + timedelta(seconds=5))
    await h.conn.execute("INSERT INTO taskboard_billing_charges (job_id, payment_intent_id,"
                         " amount, currency, customer) VALUES (%s, 'pi_1', 100, 'usd', 'cus_1')",
                         (bill,))
    h.charge(bill, "pi_1")
    dead = await h.job("billing", "dead", error="card declined", payload=BILL)
    await h.attempt(dead, "w1", "failed")
    return [noop, email, bill, dead]


async def test_a_clean_history_has_no_violations(conn: Any, tmp_path: Path) -> None:
    h = History(conn, tmp_path)
    ids = await _clean(h)
    stall = Window("stall", "w1", T0 - timedelta(seconds=3), T0 + timedelta(seconds=1))
    seen = h.observed(enqueued_ids=ids, outages=[Outage("restart", T0, frozenset({"w2"}))],
                      windows=[stall])
    report = await check(conn, seen)
    assert report.ok, report.details()
    assert any("excused" in note for note in report.notes), report.notes
    assert (report.completed, report.dead, report.pending) == (3, 1, 0)
    assert (report.rejected, report.lost_leases, report.dup_emails) == (1, 2, 1)
    assert report.recovery == 5.0


async def test_every_broken_promise_is_reported(conn: Any, tmp_path: Path) -> None:
    h = History(conn, tmp_path)
    ids = await _clean(h)
    stale = await h.job("noop", "completed")  # completed by an old token
    await h.attempt(stale, "w1", "completed")
    await h.attempt(stale, "w2", "lease_lost")
    twice = await h.job("noop", "completed")  # two accepted completions
    await h.attempt(twice, "w1", "completed")
    await h.attempt(twice, "w2", "completed")
    silent = await h.job("noop", "completed")  # a rejection nobody reported
    await h.attempt(silent, "w1", "completion_rejected")
    await h.attempt(silent, "w2", "completed")
    liar = await h.job("noop", "completed")  # reported a completion that was not accepted
    token = await h.attempt(liar, "w1", "lease_lost")
    h.said("w1", "completed", liar, token)
    await h.attempt(liar, "w2", "completed")
    await h.job("sleep", "dead", error="")  # dead without a reason
    double = await h.job("billing", "completed", payload=BILL)  # charged twice
    await h.attempt(double, "w1", "lease_lost")
    await h.attempt(double, "w2", "completed")
    await h.conn.execute("INSERT INTO taskboard_billing_charges (job_id, payment_intent_id,"
                         " amount, currency, customer) VALUES (%s, 'pi_2', 100, 'usd', 'cus_1')",
                         (double,))
    h.charge(double, "pi_2")
    h.charge(double, "pi_3")
    dup = await h.job("email", "completed")  # one attempt sent twice, no reclaim
    await h.attempt(dup, "w1", "completed")
    h.email(dup, 1)
    h.email(dup, 1)
    lost_mail = await h.job("email", "completed")  # completed, never arrived
    await h.attempt(lost_mail, "w1", "completed")
    late = await h.job("email", "completed")  # started 3 s after its local deadline
    await h.attempt(late, "w2", "completed")
    h.email(late, 1, late=3.0)
    released = await h.job("email", "completed")  # a drain released it after the send
    await h.attempt(released, "w1", "released")
    await h.attempt(released, "w2", "completed")
    h.email(released, 1)
    ghost = await h.job("email", "completed")  # from an attempt the history never had
    await h.attempt(ghost, "w2", "completed")
    h.email(ghost, 7)
    touched = await h.job("teleport", "pending")  # a kind nobody runs, yet claimed
    await h.attempt(touched, "w1", "lease_lost")
    stuck = await h.job("noop", "pending")  # a poison row left in the queue
    # Counts the triggers did not keep (as a broken trigger would leave them).
    await h.conn.execute("UPDATE taskboard_waiting_counts SET n = n + 1")
    await h.conn.execute("UPDATE taskboard_finished_counts SET n = n - 1"
                         " WHERE state = 'dead'")
    # w2 had a free slot and a fresh heartbeat for 3 s while 5 jobs waited, and said nothing.
    idle = [Sample(T0 + timedelta(seconds=60 + n * 0.25), 5, {"w2": (0.5, 0, 8, "running")})
            for n in range(13)]
    # w1 survives and w8 is killed long after the restart: both had time to recover and
    # did not; w9 was killed too soon after it to be judged.
    seen = h.observed(enqueued_ids=[*ids, 999_999],
                      outages=[Outage("restart", T0 + timedelta(seconds=30),
                                        frozenset({"w1", "w8", "w9"}))],
                      killed={"w8": T0 + timedelta(seconds=90), "w9": T0 + timedelta(seconds=31)},
                      unexpected_exits={"w3": 1}, unknown_ids=[touched], poison_ids=[stuck],
                      samples=idle)
    report = await check(conn, seen)
    [recovery] = [v for v in report.violations if v.startswith("worker did not recover")]
    assert "w1 " in recovery and "w8 " in recovery and "w9" not in recovery, recovery
    kinds = {line.split(" x")[0] for line in report.violations}
    assert kinds == {
        "enqueued job missing from the table",
        "completion accepted from a token that was not current",
        "completed job without exactly one completed attempt",
        "rejected completion the worker never reported",
        "worker reported a completion the database did not accept",
        "dead job without a reason",
        "billing charged twice for one job",
        "billing record does not match the endpoint's charge",
        "duplicate email for a job that was never reclaimed",
        "one attempt sent the same email twice",
        "completed email job whose message never arrived",
        "external effect started after its attempt's local deadline",
        "a drain released a job whose email had been sent",
        "email from an attempt the database never had",
        "a job of a kind no worker runs was touched (it must wait)",
        "poison row not quarantined (the queue may be stalled)",
        "worker silent for more than a lease while jobs waited",
        "worker process died without being killed",
        "no job completed after a database restart",
        "worker did not recover after a database restart",
        "a kept count differs from a scan of the jobs",
    }, report.details()
    assert "violations=21" in report.summary_line()
