"""How the checker tells what replication lost from what the queue did (no server needed:
it judges the evidence it is handed). With asynchronous replication the violations on jobs
whose enqueue or completion a failover lost are replication's; a violation on any other job
stays the queue's; with synchronous replication nothing is excused."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from uuid import uuid4

from tests.faults.checker import Observed, Report
from tests.faults.evidence import Violations
from tests.faults.failover import Replication, separate_losses


def _judge(synchronous: bool) -> tuple[Report, list[str], int]:
    kept, lost_token, reopened = uuid4(), uuid4(), uuid4()
    replication = Replication(cluster=None, synchronous=synchronous)  # type: ignore[arg-type]
    replication.lost_enqueues = [7]
    seen = Observed(seed=1, replication=replication)
    events: list[dict[str, Any]] = [
        {"event": "completed", "job_id": 3, "token": str(kept)},
        {"event": "completed", "job_id": 5, "token": str(lost_token)},  # its row went back
        # Its claim survived, its completion did not: the new primary expired the lease.
        {"event": "completed", "job_id": 9, "token": str(reopened)},
    ]
    bad = Violations()
    bad.add("enqueued job missing from the table", "job 7")
    bad.add("one attempt sent the same email twice", "job 5: messages per attempt row {1: 2}")
    bad.add("one attempt sent the same email twice", "job 3: messages per attempt row {2: 2}")
    bad.add("worker reported a completion the database did not accept", "fw0 job 9 token x")
    bad.add("a kept count differs from a scan of the jobs", "ready: 3 kept, 4 scanned")
    report = Report(seed=1)
    by_token = {
        (3, kept): SimpleNamespace(outcome="completed"),
        (9, reopened): SimpleNamespace(outcome="lease_lost"),
    }
    separate_losses(seen, events, by_token, bad.by_kind, report)
    return report, bad.lines(), sum(len(d) for d in bad.by_kind.values())


def test_asynchronous_losses_are_replications_and_the_rest_stays_the_queues() -> None:
    report, lines, left = _judge(synchronous=False)
    assert (report.lost_enqueues, report.lost_completions) == (1, 2)
    assert report.replication_violations == 3
    assert left == 2
    assert any("job 3" in line for line in lines)  # a job replication did not touch
    assert any("kept count" in line for line in lines)  # no job named: never excused
    report.violations = lines
    assert "replication lost: 1 enqueues, 2 completions; queue violations: 2" in (
        report.summary_line()
    )


def test_synchronous_replication_excuses_nothing() -> None:
    report, _, left = _judge(synchronous=True)
    assert (report.lost_enqueues, report.lost_completions) == (1, 2)
    assert report.replication_violations == 0
    assert left == 5
