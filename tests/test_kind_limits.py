"""Fleet-wide limits per kind, enforced by PostgreSQL across real worker processes:
`rate_per_second` (never more claims in a second), `max_running` (never more held at
once, and a dead holder's slot frees with its lease), and kinds without limits unhindered."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path

from tests import worker_procs as wp

# A running attempt's row is written when it ends (migration 15): its interval is read from
# its job row until then.
INTERVALS = """SELECT a.claimed_at, coalesce(a.ended_at, now()) FROM taskboard_attempts a
                 JOIN taskboard_jobs j ON j.id = a.job_id WHERE j.kind = %s
               UNION ALL
               SELECT claimed_at, now() FROM taskboard_jobs
                WHERE kind = %s AND lease_token IS NOT NULL"""


def most_at_once(intervals: list[tuple[object, object]]) -> int:
    """The most intervals (start, end) that overlap at one moment."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                   key=lambda edge: (edge[0], edge[1]))
    now = high = 0
    for _, step in edges:
        now += step
        high = max(high, now)
    return high


def test_sixty_jobs_at_ten_a_second_take_five_seconds_and_never_eleven_in_a_second(
    db_url: str, tmp_path: Path
) -> None:
    with wp.workers(db_url, tmp_path, 3, "--lease", "10"):
        wp.enqueue(db_url, "paced", 60)
        wp.enqueue(db_url, "long", 30)  # a kind without limits beside it, in the same queue
        # The unlimited kind is not held back by the limited one queued with it.
        wp.until(db_url, "SELECT count(*) = 30 FROM taskboard_jobs"
                 " WHERE kind = 'long' AND completed_at IS NOT NULL", timeout=20)
        assert wp.one(db_url, "SELECT count(*) FROM taskboard_jobs WHERE kind = 'paced'"
                      " AND completed_at IS NOT NULL")[0] < 60
        wp.until(db_url, "SELECT count(*) = 60 FROM taskboard_jobs"
                 " WHERE kind = 'paced' AND completed_at IS NOT NULL", timeout=30)
    starts = sorted(s for (s,) in wp.rows(
        db_url, "SELECT a.claimed_at FROM taskboard_attempts a JOIN taskboard_jobs j"
        " ON j.id = a.job_id WHERE j.kind = 'paced'"))
    assert len(starts) == 60  # each claimed once
    spread = (starts[-1] - starts[0]).total_seconds()
    assert spread >= 4.9, f"60 claims at 10/s took only {spread:.2f} s"
    second = timedelta(seconds=1)
    busiest = max(sum(1 for t in starts if s <= t < s + second) for s in starts)
    assert busiest <= 10, f"{busiest} claims in one second"


def test_one_second_jobs_at_max_running_two_never_overlap_more_than_two(
    db_url: str, tmp_path: Path
) -> None:
    # One job at a time per process: three could run at once, so two is the fleet's limit.
    with wp.workers(db_url, tmp_path, 3, "--lease", "10", "--concurrency", "1"):
        wp.enqueue(db_url, "pair", 8, seconds=1.0)
        wp.until(db_url, "SELECT count(*) = 8 FROM taskboard_jobs"
                 " WHERE kind = 'pair' AND completed_at IS NOT NULL", timeout=30)
    intervals = wp.rows(db_url, INTERVALS, "pair", "pair")
    assert len(intervals) == 8
    assert most_at_once(intervals) == 2
    workers = wp.rows(db_url, "SELECT DISTINCT worker_id FROM taskboard_attempts")
    assert len(workers) >= 2  # the limit held across processes, not within one


def test_a_killed_workers_running_slot_frees_when_its_lease_expires(
    db_url: str, tmp_path: Path
) -> None:
    # max_running=1 and a 2 s lease: the holder dies holding the slot; a second job waits
    # for it. The slot frees when the dead holder's lease expires (its job, first in line,
    # is taken again then), and never are two held at once.
    wp.enqueue(db_url, "single", 1, seconds=60)
    quick = ("--lease", "60", "--drain-timeout", "0")
    with wp.workers(db_url, tmp_path, 1, *quick, prefix="dies") as (holder,):
        wp.until(db_url, "SELECT count(*) = 1 FROM taskboard_jobs WHERE kind = 'single'"
                 " AND lease_token IS NOT NULL", timeout=20)
        wp.enqueue(db_url, "single", 1, seconds=0)  # waits on the slot the dead one holds
        holder.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        with wp.workers(db_url, tmp_path, 2, *quick, prefix="lives"):
            wp.until(db_url, "SELECT count(*) = 1 FROM taskboard_jobs"
                     " WHERE left(claimed_by, 5) = 'lives' AND lease_token IS NOT NULL",
                     timeout=20)
            waited = time.monotonic() - killed
            time.sleep(0.5)  # room for a wrong second claim to show
            intervals = wp.rows(db_url, INTERVALS, "single", "single")
    assert waited < 8, f"the slot freed only after {waited:.1f} s (lease 2 s)"
    assert len(intervals) == 2 and most_at_once(intervals) == 1, intervals
