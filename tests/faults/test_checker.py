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

from tests.faults.archive import install_archive, table_exists
from tests.faults.checker import (
    Observed,
    Outage,
    RetryDone,
    Sample,
    ScheduleRun,
    Window,
    check,
)

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

    def email(self, job_id: int, attempt: int, *, late: float = -1.0,
              at: datetime = T0) -> None:
        """A message from one attempt, started at `at`, `late` seconds after that attempt's
        local deadline (negative: before it)."""
        message_id = f"<taskboard-job-{job_id}@taskboard.local>"
        deadline = (T0 - timedelta(seconds=late)).timestamp()
        self.messages.append(ReceivedMessage(
            received_at=T0, mail_from="a@example.com", recipients=("b@example.com",),
            subject="s", message_id=message_id,
            headers=(("Message-ID", message_id), ("X-Taskboard-Job", str(job_id)),
                     ("X-Taskboard-Attempt", str(attempt)),
                     ("X-Taskboard-Deadline", f"{deadline:.3f}")),
            size=1, started_at=at))

    def charge(self, job_id: int, intent: str, *, attempt: int | None = None) -> None:
        """A charge; `attempt` names the attempt whose confirm made it (at T0)."""
        self.charges.append(Charge(
            payment_intent=intent, amount=100, currency="usd", customer="cus_1",
            idempotency_key=f"taskboard-job-{job_id}-create", confirm_key=None,
            metadata={"taskboard_job": str(job_id)}, created=T0, replays=0,
            confirm_arrived_at=None if attempt is None else T0, confirm_attempt=attempt))

    async def record_sends(self) -> None:
        """A send record for every message so far, where the table for them exists."""
        if not await table_exists(self.conn, "taskboard_email_sends"):
            return
        for m in self.messages:
            await send_record(self.conn, int(m.header("X-Taskboard-Job") or 0),
                              int(m.header("X-Taskboard-Attempt") or 0), m.message_id)

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
# The columns the effect-record work gives its table; made here where it does not exist yet.
EMAIL_SENDS = """CREATE TABLE IF NOT EXISTS taskboard_email_sends (
    job_id bigint NOT NULL, attempt integer NOT NULL, message_id text NOT NULL,
    recipient text NOT NULL, worker_id text NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT now())"""


async def send_record(conn: psycopg.AsyncConnection[Any], job_id: int, attempt: int,
                      message_id: str | None) -> None:
    await conn.execute(
        "INSERT INTO taskboard_email_sends (job_id, attempt, message_id, recipient, worker_id,"
        " sent_at) VALUES (%s, %s, %s, 'b@example.com', 'w1', %s) ON CONFLICT DO NOTHING",
        (job_id, attempt, message_id, T0),
    )


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
    await h.record_sends()
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
    await h.record_sends()
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
        # pi_3: the endpoint charged it, the database has no record of it
        "charge the Stripe endpoint made has no record in the database",
    }, report.details()
    assert "violations=22" in report.summary_line()
    if not await table_exists(conn, "taskboard_email_sends"):
        assert any("taskboard_email_sends does not exist" in n for n in report.notes), report



# --- what the operator and the newer faults add -------------------------------------------


def _seconds(n: float) -> datetime:
    return T0 + timedelta(seconds=n)


def _healthy(start: float, end: float) -> list[Sample]:
    """Samples of a worker running with a fresh heartbeat, four a second, nothing waiting."""
    count = int((end - start) * 4)
    return [Sample(_seconds(start + n * 0.25), 0, {"w1": (0.3, 0, 8, "running")})
            for n in range(count + 1)]


async def _scheduled(h: History, name: str, slot: datetime) -> int:
    cur = await h.conn.execute(
        "INSERT INTO taskboard_jobs (kind, payload, completed_at, unique_key)"
        " VALUES ('noop', '{}', %s, %s) RETURNING id",
        (slot, f"schedule:{name}:{slot:%Y-%m-%dT%H:%M:%SZ}"),
    )
    row = await cur.fetchone()
    assert row is not None
    await h.attempt(int(row[0]), "w1", "completed")
    return int(row[0])


async def _operator_history(h: History, *, broken: bool) -> Observed:
    """A run's worth of operator evidence; `broken` adds one breach of each new promise."""
    await install_archive(h.conn)
    await h.conn.execute(EMAIL_SENDS)
    retries = []
    # Retried, finished again, then pruned; and retried and still there.
    again = await h.job("noop", "completed")
    await h.attempt(again, "w1", "completed")
    await h.conn.execute("DELETE FROM taskboard_jobs WHERE id = %s", (again,))
    kept = await h.job("noop", "completed")
    await h.attempt(kept, "w1", "completed")
    retries += [RetryDone(again, _seconds(-10)), RetryDone(kept, _seconds(-10))]
    # Charged, then cancelled: the record outlived the attempt.
    cancelled = await h.job("billing", "pending", payload=BILL)
    await h.attempt(cancelled, "w1", "cancelled")
    await h.conn.execute("UPDATE taskboard_jobs SET cancelled_at = %s WHERE id = %s",
                         (T0, cancelled))
    await h.conn.execute("INSERT INTO taskboard_billing_charges (job_id, payment_intent_id,"
                         " amount, currency, customer) VALUES (%s, 'pi_c', 100, 'usd', 'cus_1')",
                         (cancelled,))
    h.charge(cancelled, "pi_c")
    # An email with its send record; an oversized row that ended dead.
    mail = await h.job("email", "completed")
    await h.attempt(mail, "w1", "completed")
    h.email(mail, 1)
    # Sent, cancelled, retried, sent again: a retry numbers attempts from 1 again, so two
    # claims are attempt 1, each with one message (not one attempt sending twice).
    resent = await h.job("email", "completed")
    await h.attempt(resent, "w1", "cancelled", ended=_seconds(-60))
    await h.conn.execute("UPDATE taskboard_jobs SET attempts = 0 WHERE id = %s", (resent,))
    await h.attempt(resent, "w2", "completed")
    h.email(resent, 1, at=_seconds(-60.5))
    h.email(resent, 1)
    await h.record_sends()
    big = await h.job("noop", "dead", error="invalid payload: too large")
    # w2 was SIGKILLed in the middle of a send and of a confirm: the world acted, nobody
    # heard, so neither has a record; the email is sent again by attempt 2.
    killed_mail = await h.job("email", "completed")
    await h.attempt(killed_mail, "w2", "lease_lost")
    await h.attempt(killed_mail, "w1", "completed")
    killed_bill = await h.job("billing", "pending", payload=BILL)
    await h.attempt(killed_bill, "w2", "lease_lost")
    h.charge(killed_bill, "pi_k", attempt=1)
    kill = Window("kill", "w2", _seconds(0.5), _seconds(0.5))
    h.email(killed_mail, 1)
    h.email(killed_mail, 2)
    await send_record(h.conn, killed_mail, 2, f"<taskboard-job-{killed_mail}@taskboard.local>")
    # A per-second schedule: every slot fired once (judged once every worker has read it,
    # from 110 on); a two-minute one at its slot; one whose slots fell in a freeze.
    for n in range(100, 116):
        if n != 113 or not broken:
            await _scheduled(h, "every", _seconds(n))
    await _scheduled(h, "two", _seconds(120))
    for n in [*range(200, 209), *range(217, 223)]:  # the server froze from 211 to 214
        await _scheduled(h, "frozen", _seconds(n))
    samples = _healthy(99, 126) + _healthy(199, 226)
    freeze = Window("freeze", None, _seconds(211), _seconds(214))
    runs = [ScheduleRun("every", "* * * * * *", _seconds(99), _seconds(117)),
            ScheduleRun("two", "*/2 * * * *", _seconds(100), _seconds(125)),
            ScheduleRun("frozen", "* * * * * *", _seconds(199), _seconds(224))]
    oversized = [big]
    if broken:
        # A prune took a retried job while it waited; a retried job left no trace at all.
        lost = await h.job("noop", "pending")
        await h.conn.execute("DELETE FROM taskboard_jobs WHERE id = %s", (lost,))
        retries += [RetryDone(lost, _seconds(-10)), RetryDone(888_888, _seconds(-10))]
        # Timed out during the confirm: charged, and the record rolled back.
        timed_out = await h.job("billing", "dead", error="timed out after 1 s", payload=BILL)
        await h.attempt(timed_out, "w1", "failed")
        h.charge(timed_out, "pi_t")
        # Charged, recorded, and yet dead of a declined card.
        declined = await h.job("billing", "dead", error="card declined (generic_decline)",
                               payload=BILL)
        await h.attempt(declined, "w1", "failed")
        await h.conn.execute("INSERT INTO taskboard_billing_charges (job_id, payment_intent_id,"
                             " amount, currency, customer)"
                             " VALUES (%s, 'pi_d', 100, 'usd', 'cus_1')", (declined,))
        h.charge(declined, "pi_d")
        # A record of a charge the endpoint never made.
        phantom = await h.job("billing", "pending", payload=BILL)
        await h.conn.execute("INSERT INTO taskboard_billing_charges (job_id, payment_intent_id,"
                             " amount, currency, customer)"
                             " VALUES (%s, 'pi_x', 100, 'usd', 'cus_1')", (phantom,))
        # A message the sink accepted that the database has no record of.
        unrecorded = await h.job("email", "completed")
        await h.attempt(unrecorded, "w1", "completed")
        h.email(unrecorded, 1)
        # A slot fired twice, one missed while w1 ran (113, above), one at a time the cron
        # does not name in UTC (an odd minute: a worker reading `*/2` in a +05:45 zone).
        await _scheduled(h, "every", _seconds(102))
        await _scheduled(h, "two", _seconds(60))
        # An oversized row still waiting at the end.
        oversized.append(await h.job("noop", "pending"))
    return h.observed(retries=retries, schedules=runs, samples=samples, windows=[freeze, kill],
                      oversized_ids=oversized)


async def test_operator_promises_kept_are_not_reported(conn: Any, tmp_path: Path) -> None:
    h = History(conn, tmp_path)
    seen = await _operator_history(h, broken=False)
    report = await check(conn, seen)
    assert report.ok, report.details()
    assert report.pruned == 1, report.details()
    assert any("every ('* * * * * *'): 16 fired, 5 slots judged, 0 missed" in n
               for n in report.notes), report.notes
    assert any("frozen ('* * * * * *'): 15 fired, 6 slots judged, 0 missed" in n
               for n in report.notes), report.notes
    assert "1 charge(s) without a record: the confirming worker died in it" in report.notes
    assert "1 email(s) without a send record: the sending worker died in it" in report.notes


async def test_operator_promises_broken_are_reported(conn: Any, tmp_path: Path) -> None:
    h = History(conn, tmp_path)
    seen = await _operator_history(h, broken=True)
    report = await check(conn, seen)
    kinds = {line.split(" x")[0] for line in report.violations}
    assert kinds == {
        "job whose retry returned success was deleted before it finished again",
        "job whose retry returned success is gone without a trace",
        "job deleted while it was not finished",
        "charge the Stripe endpoint made has no record in the database",
        "charge record of a charge the Stripe endpoint never made",
        "charged but dead of a declined card",
        "billing record does not match the endpoint's charge",
        "email the SMTP sink received has no send record",
        "schedule slot fired more than once",
        "schedule slot missed while a worker ran it",
        "schedule fired at a time its cron does not name (in UTC)",
        "oversized row never finished (the queue may be stalled)",
    }, report.details()
    [missed] = [v for v in report.violations if v.startswith("schedule slot missed")]
    assert "00:01:53Z" in missed and "x1:" in missed, missed


async def test_a_silent_drop_gives_workers_their_time_to_notice_then_judges(
    conn: Any, tmp_path: Path
) -> None:
    """After every connection was silently dropped a worker has lease/2 + 5 s to notice;
    idle with jobs waiting after that, it is reported like any silent worker."""
    h = History(conn, tmp_path)
    drop = Window("drop", None, _seconds(300), _seconds(300))
    # w1 idle with jobs waiting only within its time to notice (1.5 / 2 + 5 s); w2 for 12 s.
    samples = [
        Sample(_seconds(300 + n * 0.25), 5, {
            **({"w1": (0.3, 0, 8, "running")} if n * 0.25 < 5.5 else {}),
            "w2": (0.3, 0, 8, "running"),
        })
        for n in range(49)
    ]
    report = await check(conn, h.observed(samples=samples, windows=[drop]))
    [silent] = [v for v in report.violations if v.startswith("worker silent")]
    assert "w2 from 00:05:06" in silent and "w1" not in silent, report.details()
    report = await check(conn, h.observed(samples=samples, windows=[]))
    [silent] = [v for v in report.violations if v.startswith("worker silent")]
    assert "w1 from 00:05:00" in silent, report.details()  # without the drop: no excuse


async def test_a_stall_of_the_whole_machine_excuses_a_late_effect_start(
    conn: Any, tmp_path: Path
) -> None:
    """The 10-minute soak saw every worker and the harness silent for 11 s at once (the
    machine stopped them all); an email whose deadline check came before that stretch
    reached the sink after it. A "machine" window (tests/faults/machine.py) excuses it as a
    SIGSTOP of that worker would; without one it is a violation."""
    h = History(conn, tmp_path)
    ids = await _clean(h)
    stall = Window("stall", "w1", T0 - timedelta(seconds=3), T0 + timedelta(seconds=1))
    late = await h.job("email", "completed")
    await h.attempt(late, "w2", "completed")
    h.email(late, 1, late=1.2)
    await h.record_sends()
    machine = Window("machine", None, T0 - timedelta(seconds=2), T0 + timedelta(seconds=1))
    for windows, ok in (([stall, machine], True), ([stall], False)):
        seen = h.observed(enqueued_ids=[*ids, late],
                          outages=[Outage("restart", T0, frozenset({"w2"}))], windows=windows)
        report = await check(conn, seen)
        assert report.ok is ok, report.details()


def test_the_machine_watch_sees_a_stretch_the_process_did_not_run() -> None:
    """SIGSTOP of this very process is what a stall of the machine looks like from inside:
    the watch's thread wakes late and notes the stretch."""
    import os
    import subprocess
    import sys
    import time

    from tests.faults.machine import MachineWatch

    windows: list[Window] = []
    with MachineWatch(windows):
        time.sleep(0.2)
        # A helper process stops and resumes us: nothing in this process runs meanwhile.
        subprocess.Popen([sys.executable, "-c",
                          f"import os, signal, time; os.kill({os.getpid()}, signal.SIGSTOP);"
                          f" time.sleep(1.0); os.kill({os.getpid()}, signal.SIGCONT)"])
        time.sleep(2.0)
    assert [w.kind for w in windows] == ["machine"], windows
    assert 0.8 <= (windows[0].end - windows[0].start).total_seconds() <= 3.0
