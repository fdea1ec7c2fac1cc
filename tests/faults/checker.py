"""The fault run's judge: reads what happened, never what the workers say about themselves.

Sources, all read after the run:
- the database: every job, every attempt (the history the fenced SQL keeps), the billing
  records the handlers wrote inside their completion transactions;
- the SMTP sink's messages and the Stripe endpoint's charges (the external effects), each
  carrying the attempt it came from and the local deadline it was started under;
- the harness's samples of the queue and the workers' rows, and its fault windows;
- the workers' JSON log lines, to cross-check what each worker *reported* against what
  the database accepted, and to tell a worker that is silent from one that says why.

`check()` returns a `Report` whose `violations` name every broken promise; its
`summary_line()` is the one line a run prints.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from taskboard.core.base.services import DEFAULT_MESSAGE_ID_DOMAIN
from taskboard.core.kinds.email import message_id_for
from taskboard.core.standins.smtp_sink import ReceivedMessage
from taskboard.core.standins.stripe_endpoint import Charge

from tests.count_oracles import count_mismatches
from tests.faults.archive import archived_rows, table_exists
from tests.faults.checker_ops import (
    check_charge_records,
    check_deleted,
    check_oversized,
    check_retries,
    check_schedules,
    check_send_records,
)
from tests.faults.evidence import (
    DROP_NOTICE_SECONDS,
    MAX_LISTED,
    EffectRecord,
    Outage,
    RetryDone,
    Sample,
    ScheduleRun,
    SendRecord,
    Window,
)
from tests.faults.evidence import Attempt as _Attempt
from tests.faults.evidence import Job as _Job
from tests.faults.evidence import Violations as _Violations
from tests.faults.failover import separate_losses

__all__ = ["FAULT_KINDS", "OPERATOR_ACTIONS", "Observed", "Outage", "Report", "RetryDone",
           "Sample", "ScheduleRun", "Window", "check"]

FAULT_KINDS = (
    "stall", "kill", "cut", "restart", "smtp", "stripe",
    "readonly", "lock", "poison", "drain", "freeze", "drop", "oversize", "tz", "failover",
)
# What the harness's operator does while the faults run (tests/faults/operators.py).
OPERATOR_ACTIONS = (
    "prune", "retry", "prune_retry", "cancel", "cancel_billing", "pause", "timeout", "schedule",
)
# How late after its attempt's local deadline an effect may be seen to start: the worker
# checks the deadline, then connects and speaks (a few loopback round trips on a busy
# machine). Later than this, only a harness stall of that very worker excuses it.
EFFECT_START_TOLERANCE = 0.5
# A worker killed right after the database recorded its rejected completion may die before
# its log line is written; only rejections this close before its SIGKILL are excused.
KILL_WINDOW = timedelta(seconds=1)


@dataclass
class Observed:
    """What the harness saw and did, handed to `check` with the database."""

    seed: int
    lease: float = 1.5
    enqueued_ids: list[int] = field(default_factory=list)
    malformed_ids: list[int] = field(default_factory=list)
    unknown_ids: list[int] = field(default_factory=list)  # kinds no worker runs
    poison_ids: list[int] = field(default_factory=list)  # rows that break the claim
    faults: Counter[str] = field(default_factory=Counter)
    log_paths: dict[str, Path] = field(default_factory=dict)
    killed: dict[str, datetime] = field(default_factory=dict)  # worker -> DB time of SIGKILL
    outages: list[Outage] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    survivors: frozenset[str] = frozenset()  # alive until the harness stopped them
    recovery_timeout: float = 20.0  # a worker must complete a job this soon after a restart
    exit_codes: dict[str, int | None] = field(default_factory=dict)  # survivors after SIGTERM
    unexpected_exits: dict[str, int] = field(default_factory=dict)  # died on their own
    messages: Sequence[ReceivedMessage] = ()
    charges: Sequence[Charge] = ()
    stripe_requests: Sequence[Any] = ()  # the endpoint's RequestSeen records
    elapsed: float = 0.0
    operations: Counter[str] = field(default_factory=Counter)  # operator actions done
    retries: list[RetryDone] = field(default_factory=list)  # retries that returned success
    schedules: list[ScheduleRun] = field(default_factory=list)
    oversized_ids: list[int] = field(default_factory=list)  # multi-MB rows written by hand
    replication: Any = None  # tests/faults/failover.py's Replication, in a run on a cluster


@dataclass
class Report:
    """Counts and violations of one run."""

    seed: int
    jobs: int = 0
    completed: int = 0
    dead: int = 0
    pending: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    pruned: int = 0  # jobs a delete removed during the run
    lost_leases: int = 0
    rejected: int = 0
    dup_emails: int = 0
    emails: int = 0
    charges: int = 0
    recovery: float | None = None  # slowest worker's first completion after a restart (s)
    plain_log_lines: int = 0
    elapsed: float = 0.0
    lost_enqueues: int | None = None  # acknowledged, absent after a failover (None: no cluster)
    lost_completions: int = 0  # reported to a worker, gone after a failover: the job ran again
    replication_violations: int = 0  # violations on those jobs (asynchronous replication)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no promise was broken."""
        return not self.violations

    def summary_line(self) -> str:
        """The one line a run prints."""
        faults = " ".join(f"{kind}={self.faults.get(kind, 0)}" for kind in FAULT_KINDS)
        ops = " ".join(f"{kind}={self.operations.get(kind, 0)}" for kind in OPERATOR_ACTIONS)
        return (
            f"taskboard-faults seed={self.seed} jobs={self.jobs} completed={self.completed} "
            f"dead={self.dead} pending={self.pending} pruned={self.pruned} faults[{faults}] "
            f"ops[{ops}] "
            f"lost_leases={self.lost_leases} rejected={self.rejected} "
            f"emails={self.emails} dup_emails={self.dup_emails} charges={self.charges} "
            f"recovery={'-' if self.recovery is None else f'{self.recovery:.1f}s'} "
            f"violations={len(self.violations)} elapsed={self.elapsed:.1f}s"
            + ("" if self.lost_enqueues is None else
               f" | replication lost: {self.lost_enqueues} enqueues, {self.lost_completions}"
               f" completions; queue violations: {len(self.violations)}")
        )

    def details(self) -> str:
        """Every violation and note, one per line (for a failing test's message)."""
        return "\n".join(
            [self.summary_line()]
            + [f"VIOLATION {v}" for v in self.violations]
            + [f"note: {n}" for n in self.notes]
        )


async def check(conn: psycopg.AsyncConnection[Any], seen: Observed) -> Report:
    """Verify the run's promises against the database, the effects and the logs."""
    jobs = await _jobs(conn)
    attempts = await _attempts(conn)
    billing_rows = await _billing_rows(conn)
    sends = await _send_rows(conn)
    report = Report(seed=seen.seed, faults=Counter(seen.faults), elapsed=seen.elapsed,
                    operations=Counter(seen.operations))
    bad = _Violations()

    by_job: dict[int, list[_Attempt]] = defaultdict(list)
    for a in attempts:
        by_job[a.job_id].append(a)
    by_token = {(a.job_id, a.token): a for a in attempts}

    _check_jobs(jobs, by_job, seen, report, bad)
    events, activity = _read_logs(seen, bad, report)
    _check_reports(events, by_token, seen, bad, report)
    _check_billing(jobs, billing_rows, seen.charges, bad)
    died = _died_in_effect(by_job, seen)
    check_charge_records(seen.charges, billing_rows, bad, died, report.notes)
    _check_emails(jobs, by_job, seen.messages, bad, report)
    check_send_records(seen.messages, sends, bad, report.notes, died)
    check_retries(jobs, seen.retries, bad)
    check_deleted(jobs, bad)
    check_oversized(jobs, seen.oversized_ids, bad)
    check_schedules(seen.schedules, jobs, seen.samples, seen.windows, seen.lease, bad,
                    report.notes)
    _check_effect_deadlines(by_job, seen, bad, report)
    _check_recovery(attempts, seen, bad, report)
    _check_silence(attempts, activity, seen, bad, report)
    await _check_counts(conn, bad)
    report.charges = len(seen.charges)
    report.emails = len(seen.messages)
    report.lost_leases = sum(1 for a in attempts if a.outcome == "lease_lost")
    report.rejected = sum(1 for a in attempts if a.outcome == "completion_rejected")
    if report.plain_log_lines:
        report.notes.append(f"{report.plain_log_lines} plain-text (non-JSON) worker log lines")
    separate_losses(seen, events, by_token, bad.by_kind, report)
    report.violations = bad.lines()
    return report


# --- reading -----------------------------------------------------------------------------


# Rows the run deleted (the operator's prunes) are read from the harness's archive, as
# they were when deleted (tests/faults/archive.py).
JOB_COLUMNS = (
    "r.id, r.kind, r.payload, r.attempts, r.max_attempts, r.lease_token IS NOT NULL,"
    " r.completed_at IS NOT NULL, r.failed_at IS NOT NULL, r.cancelled_at IS NOT NULL,"
    " r.last_error, greatest(r.completed_at, r.failed_at, r.cancelled_at), r.unique_key,"
    # A job's identity keys its effects where the schema has one (effect records, issue
    # 22/30); without it, or for rows from before it, the id does.
    " coalesce(to_jsonb(r) ->> 'identity', r.id::text)"
)
ATTEMPT_COLUMNS = (
    "r.id, r.job_id, r.attempt, r.lease_token, r.worker_id, r.claimed_at, r.ended_at,"
    " r.outcome"
)
SEND_COLUMNS = "r.job_id, r.attempt, r.message_id"


async def _jobs(conn: psycopg.AsyncConnection[Any]) -> dict[int, _Job]:
    cur = await conn.execute(
        "SELECT " + JOB_COLUMNS + ", NULL::timestamptz FROM taskboard_jobs r ORDER BY id"
    )
    jobs = {row[0]: _Job(*row) for row in await cur.fetchall()}
    for row in await archived_rows(conn, "taskboard_jobs", JOB_COLUMNS):
        jobs.setdefault(row[0], _Job(*row))
    return dict(sorted(jobs.items()))


# An attempt's row is written when it ends (migration 15): one still running at the end of
# the run is read from its job row, after every written row (ids past any real one).
RUNNING_ATTEMPTS = (
    "SELECT (1::bigint << 62) + j.id, j.id, j.claim_count, j.lease_token,"
    " coalesce(j.claimed_by, '?'), j.claimed_at, NULL::timestamptz, NULL::text"
    " FROM taskboard_jobs j WHERE j.lease_token IS NOT NULL AND NOT EXISTS ("
    "SELECT 1 FROM taskboard_attempts a WHERE a.job_id = j.id AND a.lease_token = j.lease_token)"
)


async def _attempts(conn: psycopg.AsyncConnection[Any]) -> list[_Attempt]:
    cur = await conn.execute(
        "SELECT " + ATTEMPT_COLUMNS + " FROM taskboard_attempts r UNION ALL " + RUNNING_ATTEMPTS
    )
    rows = {row[0]: row for row in await cur.fetchall()}
    for row in await archived_rows(conn, "taskboard_attempts", ATTEMPT_COLUMNS):
        rows.setdefault(row[0], row[:-1])
    return [_Attempt(*row) for _, row in sorted(rows.items())]


async def _billing_rows(conn: psycopg.AsyncConnection[Any]) -> list[EffectRecord]:
    """Every charge record, kept or deleted; `status` where the table has one."""
    cur = await conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_name = 'taskboard_billing_charges'"
        " AND column_name = 'status' AND table_schema = current_schema()"
    )
    columns = "r.job_id, r.payment_intent_id, r.amount, r.currency, " + (
        "r.status::text" if await cur.fetchone() else "NULL::text"
    )
    cur = await conn.execute("SELECT " + columns + " FROM taskboard_billing_charges r")
    rows = await cur.fetchall()
    rows += [row[:-1] for row in await archived_rows(conn, "taskboard_billing_charges", columns)]
    return [EffectRecord(*row) for row in rows]


async def _send_rows(conn: psycopg.AsyncConnection[Any]) -> list[SendRecord] | None:
    """Every email send record, kept or deleted; None while the table does not exist."""
    if not await table_exists(conn, "taskboard_email_sends"):
        return None
    cur = await conn.execute("SELECT " + SEND_COLUMNS + " FROM taskboard_email_sends r")
    rows = await cur.fetchall()
    rows += [row[:-1] for row in await archived_rows(conn, "taskboard_email_sends", SEND_COLUMNS)]
    return [SendRecord(*row) for row in rows]


def _read_logs(
    seen: Observed, bad: _Violations, report: Report
) -> tuple[list[dict[str, Any]], dict[str, list[datetime]]]:
    """Every event line of every worker log, and when each worker wrote anything at all;
    malformed lines and logged errors are flagged."""
    events: list[dict[str, Any]] = []
    activity: dict[str, list[datetime]] = defaultdict(list)
    for worker, path in sorted(seen.log_paths.items()):
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines) and worker in seen.killed:
                    report.notes.append(f"{worker}: last log line cut by SIGKILL")
                elif "Traceback" in line or line.startswith("  File "):
                    bad.add("traceback in a worker log", f"{worker}:{number}: {line[:160]}")
                else:
                    # Third-party loggers (psycopg, psycopg.pool) write plain text past the
                    # JSON formatter; tests/faults/test_worker_logs.py holds that promise.
                    report.plain_log_lines += 1
                continue
            if not isinstance(data, dict):
                bad.add("log line is not a JSON object", f"{worker}:{number}")
                continue
            if isinstance(data.get("ts"), str):
                activity[worker].append(datetime.fromisoformat(data["ts"]))
            if data.get("level") in ("error", "critical"):
                bad.add("worker logged an error", f"{worker}: {line[:240]}")
            if "event" in data:
                events.append(data)
    for stamps in activity.values():
        stamps.sort()
    return events, activity


# --- the promises ------------------------------------------------------------------------

async def _check_counts(conn: psycopg.AsyncConnection[Any], bad: _Violations) -> None:
    """The board's counts survived every fault: kept by triggers inside the statements that
    move jobs, they must say what a scan says (a rolled-back claim, a killed worker, a
    restart in the middle of a completion)."""
    for mismatch in await count_mismatches(conn, MAX_LISTED):
        bad.add("a kept count differs from a scan of the jobs", mismatch)


def _check_jobs(
    jobs: Mapping[int, _Job],
    by_job: Mapping[int, list[_Attempt]],
    seen: Observed,
    report: Report,
    bad: _Violations,
) -> None:
    """Nothing lost; completed exactly once, by the current token; dead with a reason."""
    report.jobs = len(jobs)
    for job_id in seen.enqueued_ids:
        if job_id not in jobs:
            bad.add("enqueued job missing from the table", f"job {job_id}")
    for job_id in seen.malformed_ids:
        job = jobs.get(job_id)
        if job is not None and not job.dead:
            bad.add("malformed row did not become dead", f"job {job_id} ({job.kind})")
        elif job is not None and not (job.last_error or "").startswith("invalid payload"):
            bad.add("malformed row dead without its reason", f"job {job_id}: {job.last_error!r}")
    for job_id in seen.unknown_ids:
        job = jobs.get(job_id)
        if job is None or job.dead or job.completed or job.attempts or by_job.get(job_id):
            bad.add("a job of a kind no worker runs was touched (it must wait)",
                    f"job {job_id}: {job}")
    for job_id in seen.poison_ids:
        job = jobs.get(job_id)
        if job is None or not job.dead:
            bad.add("poison row not quarantined (the queue may be stalled)", f"job {job_id}")
        elif not (job.last_error or "").startswith(("quarantined:", "attempts used up")):
            bad.add("poison row dead without its reason", f"job {job_id}: {job.last_error!r}")
    for job in jobs.values():
        history = by_job.get(job.id, [])
        finished = [job.completed, job.dead, job.cancelled]
        if sum(finished) > 1:
            bad.add("job in two final states", f"job {job.id}")
        if job.completed:
            report.completed += 1
        elif job.dead:
            report.dead += 1
        elif not job.cancelled and job.id not in seen.unknown_ids and job.pruned_at is None:
            report.pending += 1
        if job.attempts > job.max_attempts and job.id not in seen.poison_ids:
            # (An overflow poison row is written by hand with its attempts used up.)
            bad.add("more claims than max_attempts", f"job {job.id}: {job.attempts}")
        done = [a for a in history if a.outcome == "completed"]
        if job.completed:
            if len(done) != 1:
                bad.add("completed job without exactly one completed attempt",
                        f"job {job.id}: {len(done)} completed attempts")
            elif done[0].id != max(a.id for a in history):
                bad.add("completion accepted from a token that was not current",
                        f"job {job.id}: attempt {done[0].attempt} by {done[0].worker} completed "
                        f"but a later claim exists")
        elif done:
            bad.add("completed attempt on a job that is not completed", f"job {job.id}")
        if job.dead and not (job.last_error or "").strip():
            bad.add("dead job without a reason", f"job {job.id}")
        if job.pruned_at is not None:
            report.pruned += 1
        if any(finished) and job.leased:
            bad.add("finished job still holds a lease", f"job {job.id}")
        if any(finished):
            open_attempts = [a for a in history if a.outcome is None]
            if open_attempts:
                bad.add("finished job with an attempt left open",
                        f"job {job.id} attempt {open_attempts[0].attempt}")


def _check_reports(
    events: Iterable[Mapping[str, Any]],
    by_token: Mapping[tuple[int, UUID], _Attempt],
    seen: Observed,
    bad: _Violations,
    report: Report,
) -> None:
    """What workers said against what the database accepted."""
    said_rejected: set[tuple[int, UUID]] = set()
    for event in events:
        name = event.get("event")
        if name not in ("completed", "completion_rejected"):
            continue
        key = (int(event["job_id"]), UUID(event["token"]))
        attempt = by_token.get(key)
        who = f"{event.get('worker_id')} job {key[0]} token {str(key[1])[:8]}"
        if attempt is None:
            bad.add(f"worker reported {name} for an attempt the database never had", who)
        elif name == "completed" and attempt.outcome != "completed":
            bad.add("worker reported a completion the database did not accept",
                    f"{who}: outcome {attempt.outcome}")
        elif name == "completion_rejected":
            said_rejected.add(key)
            if attempt.outcome == "completed":
                bad.add("worker reported a rejection but its completion was accepted", who)
    excused = 0
    for key, attempt in by_token.items():
        if attempt.outcome != "completion_rejected" or key in said_rejected:
            continue
        killed_at = seen.killed.get(attempt.worker)
        if (
            killed_at is not None
            and attempt.ended_at is not None
            and killed_at - KILL_WINDOW <= attempt.ended_at <= killed_at + KILL_WINDOW
        ):
            excused += 1
            continue
        bad.add("rejected completion the worker never reported",
                f"{attempt.worker} job {key[0]} token {str(key[1])[:8]}")
    if excused:
        report.notes.append(f"{excused} rejection(s) recorded just before their worker's SIGKILL")


def _check_billing(
    jobs: Mapping[int, _Job],
    records: Sequence[EffectRecord],
    charges: Sequence[Charge],
    bad: _Violations,
) -> None:
    """At most one charge per job; each job's records name the charges the endpoint made for
    it; every completed billing job has one. A record outlives its attempt's fate (a cancel
    or a timeout during the confirm keeps it), so a record of an unfinished or cancelled job
    is fine as long as the endpoint made that charge (`check_charge_records`)."""
    per_job: dict[int | None, list[Charge]] = defaultdict(list)
    for c in charges:
        per_job[c.job_id].append(c)
    for job_id, made in per_job.items():
        job = jobs.get(job_id) if job_id is not None else None
        if job is None or job.kind != "billing":
            bad.add("charge for no billing job", f"job {job_id}: {made[0].payment_intent}")
            continue
        if len(made) > 1:
            bad.add("billing charged twice for one job",
                    f"job {job_id}: {', '.join(c.payment_intent for c in made)}")
        # A job may die after its charge (its last attempt timed out or lost its lease in
        # the confirm): the record tells (check_charge_records). Dead of a refusal is a lie.
        if job.dead and "card declined" in (job.last_error or ""):
            bad.add("charged but dead of a declined card", f"job {job_id}: {job.last_error}")
    recorded: dict[int, set[str]] = defaultdict(set)
    for record in records:
        if record.status not in (None, "succeeded"):
            continue
        recorded[record.job_id].add(record.payment_intent)
        job = jobs.get(record.job_id)
        payload = job.payload if job is not None and isinstance(job.payload, dict) else {}
        if (record.amount, record.currency) != (payload.get("amount"), payload.get("currency")):
            bad.add("billing record amount differs from the payload", f"job {record.job_id}")
    for job_id, intents in recorded.items():
        charged = {c.payment_intent for c in per_job.get(job_id, [])}
        if intents != charged:
            bad.add("billing record does not match the endpoint's charge",
                    f"job {job_id}: recorded {sorted(intents)}, endpoint {sorted(charged)}")
    for job in jobs.values():
        if job.kind == "billing" and job.completed:
            if job.id not in recorded:
                bad.add("completed billing job without its record", f"job {job.id}")
            if not per_job.get(job.id):
                bad.add("completed billing job never charged", f"job {job.id}")


def _check_emails(
    jobs: Mapping[int, _Job],
    by_job: Mapping[int, list[_Attempt]],
    messages: Sequence[ReceivedMessage],
    bad: _Violations,
    report: Report,
) -> None:
    """Every completed email arrived; duplicates only for reclaimed jobs, same Message-ID."""
    per_job: dict[int, list[ReceivedMessage]] = defaultdict(list)
    for m in messages:
        header = m.header("X-Taskboard-Job") or ""
        if not header.isdigit():
            bad.add("email without a job header", f"{m.message_id}")
            continue
        per_job[int(header)].append(m)
    for job_id, got in per_job.items():
        job = jobs.get(job_id)
        if job is None or job.kind != "email":
            bad.add("email for no email job", f"job {job_id}")
            continue
        expected = message_id_for(job.identity, DEFAULT_MESSAGE_ID_DOMAIN)
        if any(m.message_id != expected for m in got):
            bad.add("email attempts with different Message-IDs",
                    f"job {job_id}: {sorted({str(m.message_id) for m in got})}")
        history = by_job.get(job_id, [])
        sent_by: Counter[int] = Counter()
        for m in got:
            ordinal = m.header("X-Taskboard-Attempt") or ""
            started = m.started_at or m.received_at
            attempt = _attempt_at(history, int(ordinal), started) if ordinal.isdigit() else None
            if attempt is None:
                bad.add("email from an attempt the database never had",
                        f"job {job_id} attempt {ordinal!r}")
                continue
            sent_by[attempt.id] += 1
            if attempt.outcome == "released":
                bad.add("a drain released a job whose email had been sent",
                        f"job {job_id} attempt {attempt.attempt} ({attempt.worker})")
        if any(n > 1 for n in sent_by.values()):
            bad.add("one attempt sent the same email twice",
                    f"job {job_id}: messages per attempt row {dict(sent_by)}")
        if len(got) > 1:
            report.dup_emails += 1
            if len(by_job.get(job_id, [])) < 2:
                bad.add("duplicate email for a job that was never reclaimed",
                        f"job {job_id}: {len(got)} messages, one attempt")
    for job in jobs.values():
        if job.kind == "email" and job.completed and not per_job.get(job.id):
            bad.add("completed email job whose message never arrived", f"job {job.id}")


def _attempt_at(history: Sequence[_Attempt], ordinal: int, at: datetime) -> _Attempt | None:
    """The attempt `ordinal` of a job that was running at `at`. A retry starts a job's
    attempt numbers again, so one ordinal may name several claims: the latest one claimed
    before `at` (same host, same clock; a little slack) is the one that acted."""
    same = [a for a in history if a.attempt == ordinal]
    before = [a for a in same if a.claimed_at <= at + timedelta(seconds=0.5)]
    if before:
        return max(before, key=lambda a: a.claimed_at)
    return min(same, key=lambda a: a.claimed_at, default=None)


def _died_in_effect(
    by_job: Mapping[int, list[_Attempt]], seen: Observed
) -> Callable[[int, int, datetime], bool]:
    """Whether attempt `n` of a job died (SIGKILL, or a drain that left the call running)
    while its effect, started at a time, was in flight: the outside world acted, the worker
    never heard, so no record of that attempt can exist (a later attempt replays a charge and
    records it; an email is sent again under its own attempt)."""
    slack = timedelta(seconds=2 * seen.lease + 2)

    def died(job_id: int, ordinal: int, started: datetime) -> bool:
        attempt = _attempt_at(by_job.get(job_id, []), ordinal, started)
        if attempt is None:
            return False
        return any(
            w.worker == attempt.worker and (
                (w.kind == "kill" and started <= w.start <= started + slack)
                or (w.kind == "drain" and w.start - slack <= started <= w.end)
            )
            for w in seen.windows
        )

    return died


def _check_effect_deadlines(
    by_job: Mapping[int, list[_Attempt]], seen: Observed, bad: _Violations, report: Report
) -> None:
    """No external effect started after its attempt's local deadline (the time the worker
    itself stamped on the call), beyond a few round trips' slack. The one gap a local
    check cannot close: a worker stopped between its check and its first byte; only a
    harness stall of that worker, or a stall of the whole machine (tests/faults/machine.py),
    across that moment excuses a late start."""
    excused = 0
    for started, job_id, ordinal, deadline, what in _effects(seen):
        late = started.timestamp() - deadline
        if late <= EFFECT_START_TOLERANCE:
            continue
        attempt = _attempt_at(by_job.get(job_id, []), ordinal, started)
        worker = attempt.worker if attempt else None
        check_from = datetime.fromtimestamp(deadline - seen.lease, UTC)
        if any(
            ((w.kind == "stall" and w.worker == worker) or w.kind == "machine")
            and w.start <= started and w.end >= check_from
            for w in seen.windows
        ):
            excused += 1
            continue
        bad.add("external effect started after its attempt's local deadline",
                f"{what} for job {job_id} attempt {ordinal} ({worker}) started {late:.2f}s late")
    if excused:
        report.notes.append(f"{excused} late effect start(s) excused: the worker was SIGSTOPped"
                            " or the machine stalled")


def _effects(seen: Observed) -> list[tuple[datetime, int, int, float, str]]:
    """(start, job, attempt, local deadline, what) of every effect that carries them."""
    out = []
    for m in seen.messages:
        job, ordinal = m.header("X-Taskboard-Job") or "", m.header("X-Taskboard-Attempt") or ""
        deadline = m.header("X-Taskboard-Deadline")
        if job.isdigit() and ordinal.isdigit() and deadline:
            started = getattr(m, "started_at", None) or m.received_at
            out.append((started, int(job), int(ordinal), float(deadline), "email"))
    for r in seen.stripe_requests:
        job, ordinal = getattr(r, "job", None), getattr(r, "attempt", None)
        deadline, at = getattr(r, "deadline", None), getattr(r, "at", None)
        if job is not None and ordinal is not None and deadline is not None and at is not None:
            out.append((at, job, ordinal, deadline, f"stripe {r.path}"))
    return out


def _check_silence(
    attempts: Sequence[_Attempt],
    activity: Mapping[str, list[datetime]],
    seen: Observed,
    bad: _Violations,
    report: Report,
) -> None:
    """No worker is silent for more than one lease while jobs wait: a live worker with a free
    slot (or whose heartbeat stopped) and claimable jobs in the queue either claims, or says
    in its log why it cannot. Whole-server faults (and a lease after them) are left out,
    and so is each worker's own stall, kill or drain. After a silent drop of its
    connections a worker has its target's time to notice (lease/2 + 5 s), then is judged."""
    limit = timedelta(seconds=seen.lease + 1.0)
    after = timedelta(seconds=seen.lease)
    server = [w for w in seen.windows if w.kind in ("freeze", "readonly", "restart", "failover")]
    notice = timedelta(seconds=seen.lease / 2 + DROP_NOTICE_SECONDS)
    drops = [w for w in seen.windows if w.kind == "drop"]
    claims: dict[str, list[datetime]] = defaultdict(list)
    for a in attempts:
        claims[a.worker].append(a.claimed_at)
    judged = 0
    for worker in sorted(seen.log_paths):
        own = [w for w in seen.windows if w.worker == worker]
        marks = sorted(activity.get(worker, []) + claims.get(worker, []))
        run_start: datetime | None = None
        for sample in seen.samples:
            info = sample.workers.get(worker)
            excluded = (
                info is None
                or any(w.start <= sample.at <= w.end + after for w in server)
                or any(w.start <= sample.at <= w.end for w in own if w.kind == "stall")
                or any(w.start <= sample.at <= w.end + notice for w in drops
                       if w.worker in (None, worker))
                or any(sample.at >= w.start for w in own if w.kind in ("kill", "drain"))
            )
            suspicious = False
            if not excluded and info is not None and sample.ready > 0:
                age, in_flight, capacity, state = info
                idle = age <= 2.5 and in_flight < capacity and state == "running"
                suspicious = idle or age > max(2.5, seen.lease)
            if not suspicious:
                run_start = None
                continue
            run_start = run_start or sample.at
            if sample.at - run_start <= limit:
                continue
            judged += 1
            if not any(run_start <= m <= sample.at for m in marks):
                bad.add("worker silent for more than a lease while jobs waited",
                        f"{worker} from {run_start:%H:%M:%S.%f} for "
                        f"{(sample.at - run_start).total_seconds():.1f}s")
            run_start = None
    if not seen.samples:
        bad.add("no samples of the queue were taken", "the silence check had nothing to judge")
    report.notes.append(f"silence check: {len(seen.samples)} samples, {judged} long idle stretches")


def _check_recovery(
    attempts: Sequence[_Attempt], seen: Observed, bad: _Violations, report: Report
) -> None:
    """Workers came back after each database restart without help, and are still alive."""
    for worker, code in sorted(seen.unexpected_exits.items()):
        bad.add("worker process died without being killed", f"{worker}: exit code {code}")
    for worker, code in sorted(seen.exit_codes.items()):
        if code != 0:
            bad.add("worker did not exit 0 after SIGTERM", f"{worker}: {code}")
    completed_by: dict[str, list[datetime]] = defaultdict(list)
    for a in attempts:
        if a.outcome == "completed" and a.ended_at is not None:
            completed_by[a.worker].append(a.ended_at)
    limit = timedelta(seconds=seen.recovery_timeout)
    for number, restart in enumerate(seen.outages, 1):
        after = [t for times in completed_by.values() for t in times if t > restart.back_at]
        if not after:
            bad.add(f"no job completed after a database {restart.kind}", f"{restart.kind} {number}")
        for worker in sorted(restart.workers):
            # Judge every worker that outlived the restart by the recovery limit: the
            # survivors, and those killed later than that (the rest left too soon).
            killed_at = seen.killed.get(worker)
            if worker not in seen.survivors and (
                killed_at is None or killed_at - restart.back_at <= limit
            ):
                continue
            first = min((t for t in completed_by.get(worker, []) if t > restart.back_at),
                        default=None)
            if first is None or first - restart.back_at > limit:
                bad.add(f"worker did not recover after a database {restart.kind}",
                        f"{worker} completed nothing within {limit.total_seconds():g}s "
                        f"of {restart.kind} {number}")
                continue
            took = (first - restart.back_at).total_seconds()
            report.recovery = max(report.recovery or 0.0, took)
