"""The promises the operator's actions and the newer faults add to the fault run's checker.

- every job whose retry returned success exists afterwards, or was pruned only after it
  finished again (a prune deciding from a snapshot deletes it while it waits);
- no job is deleted while unfinished;
- every charge the Stripe endpoint made has its record in the database, whatever the job's
  fate (a cancel or a timeout during the confirm rolled the record back);
- every email the SMTP sink received has its send record (once the table exists);
- each slot of a schedule fires at most once, only at a slot of its cron read in UTC, and
  none is missed while a worker runs the schedule;
- oversized rows written by hand end finished (the queue did not stall on them).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from croniter import croniter
from taskboard.core.engine.scheduler import RELOAD_SECONDS
from taskboard.core.standins.smtp_sink import ReceivedMessage
from taskboard.core.standins.stripe_endpoint import Charge

from tests.faults.evidence import (
    DROP_NOTICE_SECONDS,
    EffectRecord,
    Job,
    RetryDone,
    Sample,
    ScheduleRun,
    SendRecord,
    Violations,
    Window,
)

SCHEDULE_KEY_PREFIX = "schedule:"
SLOT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# Faults during which (and a lease after which) nobody can be expected to fire a slot: the
# server is away, or every worker's connections are.
FLEET_WIDE = ("freeze", "readonly", "restart", "drop", "failover")
RELOAD = timedelta(seconds=RELOAD_SECONDS)
# (job, attempt, when its effect started) -> that attempt's worker died in the call
Died = Callable[[int, int, datetime], bool]
SUCCEEDED = (None, "succeeded")  # a record's status; None where the table has no status


def _utc(at: datetime) -> str:
    """A time as the messages show it, whatever the session's zone was."""
    return f"{at.astimezone(UTC):%H:%M:%S.%f}Z"


def check_retries(jobs: Mapping[int, Job], retries: Sequence[RetryDone], bad: Violations) -> None:
    """A retry that returned success left a job that exists, or that finished again before
    a prune deleted it."""
    for retry in retries:
        job = jobs.get(retry.job_id)
        if job is None:
            bad.add("job whose retry returned success is gone without a trace",
                    f"job {retry.job_id} (retried at {_utc(retry.at)})")
        elif job.pruned_at is not None and not (
            job.finished and job.finished_at is not None and job.finished_at > retry.at
        ):
            bad.add("job whose retry returned success was deleted before it finished again",
                    f"job {job.id} retried at {_utc(retry.at)}, deleted at "
                    f"{_utc(job.pruned_at)}")


def check_deleted(jobs: Mapping[int, Job], bad: Violations) -> None:
    """Only finished jobs are deleted."""
    for job in jobs.values():
        if job.pruned_at is not None and (not job.finished or job.leased):
            bad.add("job deleted while it was not finished",
                    f"job {job.id} ({job.kind}) deleted at {_utc(job.pruned_at)}")


def check_charge_records(
    charges: Sequence[Charge],
    records: Sequence[EffectRecord],
    bad: Violations,
    died: Died,
    notes: list[str],
) -> None:
    """Every charge the endpoint made has a record that names it, with its amount, unless
    the attempt that confirmed it died in the call (and no later attempt replayed it)."""
    by_intent = {r.payment_intent: r for r in records}
    excused = 0
    for charge in charges:
        record = by_intent.get(charge.payment_intent)
        if record is None and _died_confirming(charge, died):
            excused += 1
        elif record is None:
            bad.add("charge the Stripe endpoint made has no record in the database",
                    f"job {charge.job_id}: {charge.payment_intent} "
                    f"{charge.amount} {charge.currency}")
        elif (record.job_id, record.amount, record.currency.lower()) != (
            charge.job_id, charge.amount, charge.currency.lower()
        ):
            bad.add("charge record differs from the endpoint's charge",
                    f"{charge.payment_intent}: recorded job {record.job_id} {record.amount} "
                    f"{record.currency}, charged job {charge.job_id} {charge.amount} "
                    f"{charge.currency}")
    if excused:
        notes.append(f"{excused} charge(s) without a record: the confirming worker died in it")
    charged = {c.payment_intent for c in charges}
    for record in records:
        if record.status in SUCCEEDED and record.payment_intent not in charged:
            bad.add("charge record of a charge the Stripe endpoint never made",
                    f"job {record.job_id}: {record.payment_intent}")


def _died_confirming(charge: Charge, died: Died) -> bool:
    job, attempt, at = charge.job_id, charge.confirm_attempt, charge.confirm_arrived_at
    return job is not None and attempt is not None and at is not None and died(job, attempt, at)


def check_send_records(
    messages: Sequence[ReceivedMessage],
    sends: Sequence[SendRecord] | None,
    bad: Violations,
    notes: list[str],
    died: Died,
) -> None:
    """Every message the sink accepted has the send record of its job and attempt, unless
    that attempt's worker died while sending it."""
    if sends is None:
        notes.append("send records not checked: the table taskboard_email_sends does not exist")
        return
    recorded: dict[tuple[int, int], list[SendRecord]] = defaultdict(list)
    for send in sends:
        recorded[(send.job_id, send.attempt)].append(send)
    excused = 0
    for message in messages:
        job, attempt = message.header("X-Taskboard-Job"), message.header("X-Taskboard-Attempt")
        if not (job and job.isdigit() and attempt and attempt.isdigit()):
            continue  # the email checks flag a message without its stamp
        rows = recorded.get((int(job), int(attempt)), [])
        started = message.started_at or message.received_at
        if not rows and died(int(job), int(attempt), started):
            excused += 1
        elif not rows:
            bad.add("email the SMTP sink received has no send record",
                    f"job {job} attempt {attempt} {message.message_id}")
        elif all(r.message_id not in (None, message.message_id) for r in rows):
            bad.add("send record names another Message-ID",
                    f"job {job} attempt {attempt}: {rows[0].message_id} != {message.message_id}")
    if excused:
        notes.append(f"{excused} email(s) without a send record: the sending worker died in it")


def check_oversized(jobs: Mapping[int, Job], ids: Sequence[int], bad: Violations) -> None:
    """Rows of a few megabytes written by hand ended, one way or another."""
    for job_id in ids:
        job = jobs.get(job_id)
        if job is None or not job.finished:
            bad.add("oversized row never finished (the queue may be stalled)", f"job {job_id}")


def slot_of(key: str | None, name: str) -> datetime | None:
    """The slot (UTC) a scheduled job's unique key names, for schedule `name`."""
    prefix = f"{SCHEDULE_KEY_PREFIX}{name}:"
    if key is None or not key.startswith(prefix):
        return None
    try:
        return datetime.strptime(key[len(prefix):], SLOT_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def is_slot(cron: str, at: datetime) -> bool:
    """True when `at` is a time `cron` names, read in UTC."""
    start = (at - timedelta(seconds=1)).astimezone(UTC)
    nxt: datetime = croniter(cron, start).get_next(datetime)
    return nxt == at


def check_schedules(
    runs: Sequence[ScheduleRun],
    jobs: Mapping[int, Job],
    samples: Sequence[Sample],
    windows: Sequence[Window],
    lease: float,
    bad: Violations,
    notes: list[str],
) -> None:
    """At most once per slot, only at slots (UTC), none missed while a worker ran."""
    margin = timedelta(seconds=lease + 1.0)
    notice = timedelta(seconds=lease / 2 + DROP_NOTICE_SECONDS + 1.0)  # after a drop
    away = [(w.start - margin, w.end + (notice if w.kind == "drop" else margin))
            for w in windows if w.kind in FLEET_WIDE]
    for run in runs:
        fired: Counter[datetime] = Counter()
        for job in jobs.values():
            slot = slot_of(job.unique_key, run.name)
            if slot is not None:
                fired[slot] += 1
        for slot, times in sorted(fired.items()):
            if times > 1:
                bad.add("schedule slot fired more than once",
                        f"{run.name} {slot:%H:%M:%S}: {times} jobs")
            if not is_slot(run.cron, slot):
                bad.add("schedule fired at a time its cron does not name (in UTC)",
                        f"{run.name} ({run.cron!r}) at {slot:%Y-%m-%d %H:%M:%S}Z")
        if not fired:
            notes.append(f"schedule {run.name} ({run.cron!r}): never fired, nothing judged")
            continue
        # Workers read the schedules every RELOAD_SECONDS: judge from when every worker
        # running since the first slot fired has read this one.
        end = run.removed_at or (samples[-1].at if samples else run.added_at)
        judged = missed = 0
        it = croniter(run.cron, (min(fired) + RELOAD).astimezone(UTC))
        while True:
            slot = it.get_next(datetime)
            if slot >= end - timedelta(seconds=1):
                break
            if any(start <= slot <= end for start, end in away):
                continue
            if not _someone_ran(slot, samples, windows):
                continue  # no worker was there to run it
            judged += 1
            if slot not in fired:
                missed += 1
                bad.add("schedule slot missed while a worker ran it",
                        f"{run.name} ({run.cron!r}) {slot:%H:%M:%S}Z")
        notes.append(f"schedule {run.name} ({run.cron!r}): {sum(fired.values())} fired, "
                     f"{judged} slots judged, {missed} missed")


def _someone_ran(slot: datetime, samples: Sequence[Sample], windows: Sequence[Window]) -> bool:
    """A worker was running, with a fresh heartbeat, in every sample of the second after
    `slot` (and not stopped by the harness)."""
    after = [s for s in samples if slot <= s.at <= slot + timedelta(seconds=1)]
    if not after:
        return False
    for sample in after:
        healthy = [
            worker for worker, (age, _, _, state) in sample.workers.items()
            if state == "running" and age <= 2.5 and not any(
                w.worker == worker and w.start <= sample.at
                and (w.kind in ("kill", "drain") or sample.at <= w.end)
                for w in windows
            )
        ]
        if not healthy:
            return False
    return True
