"""The failover fault: the fleet runs against a primary and a streaming standby
(tests/ha/cluster.py) and the primary is lost, by turns killed, frozen or turned read-only,
and the standby promoted; the old primary is then rebuilt as the new standby, so the run
can fail over again.

With synchronous replication (the default) a commit is acknowledged only once the standby
has it, so a failover loses nothing acknowledged and every promise of the checker still
holds. With asynchronous replication the standby is first made to fall behind for a moment
(its WAL sender stalled, as a busy link would), and a failover loses the last commits: the
harness notes which acknowledged enqueues the new primary lacks, the checker counts the
completions workers were told of that the database no longer has, and the violations that
follow from those lost rows are reported as what replication lost, apart from the queue's.

The other faults act on whichever server is the primary at the time (`restart`, `freeze`,
`readonly`, `cut`, ...). `drop` is left out: its proxy forwards to one server address, and a
failover moves the primary to another.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg

from tests.faults.archive import ARCHIVE_TABLE
from tests.faults.evidence import Outage, Window
from tests.ha.cluster import Cluster, failover

__all__ = ["FAILOVER_SOAK_WEIGHTS", "Replication", "fault_failover", "separate_losses"]

VARIANTS = ("kill", "freeze", "read_only")
STANDBY_NAME = "standby"  # the application_name the cluster's standbys stream under
# The soak's fault mix against a cluster: the single-server mix without `drop`, plus a
# failover now and then (each costs a rebuild of the old primary, a few seconds).
FAILOVER_SOAK_WEIGHTS: Mapping[str, float] = {
    "stall": 2, "kill": 2, "cut": 2, "restart": 0.6, "smtp": 2, "stripe": 2,
    "readonly": 0.6, "lock": 1, "poison": 0.8, "drain": 1, "freeze": 0.5,
    "drop": 0, "oversize": 0.5, "tz": 0.3, "failover": 3,
}
JOB_IN_DETAIL = re.compile(r"\bjob (\d+)\b")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Replication:
    """The cluster a run uses, its replication mode, and what failovers lost."""

    cluster: Cluster
    synchronous: bool = True
    lost_enqueues: list[int] = field(default_factory=list)
    wal_behind: list[int | None] = field(default_factory=list)

    def start(self) -> None:
        if self.synchronous:
            self.cluster.primary.set_synchronous(STANDBY_NAME)

    def restart_primary(self) -> None:
        """The `restart` fault: the primary crashes and comes back (the standby waits)."""
        primary = self.cluster.primary
        primary.stop()
        primary.start()

    def freeze_primary(self, seconds: float) -> None:
        """The `freeze` fault: the primary hangs for `seconds`, then goes on."""
        primary = self.cluster.primary
        primary.freeze()
        try:
            time.sleep(seconds)
        finally:
            primary.thaw()


def _absent(url: str, ids: list[int]) -> list[int]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            # A job the operator pruned is in the harness's archive (tests/faults/archive.py).
            "SELECT x FROM unnest(%s::bigint[]) AS x"
            " EXCEPT SELECT id FROM taskboard_jobs"
            f" EXCEPT SELECT (row ->> 'id')::bigint FROM {ARCHIVE_TABLE}"
            " WHERE tbl = 'taskboard_jobs'",
            (ids,),
        ).fetchall()
    return sorted(int(r[0]) for r in rows)


async def fault_failover(harness: Any, fault: Any) -> str:
    """Fail the primary over to the standby (`fault.variant`), then rebuild the old one."""
    rep: Replication = harness.replication
    cluster = rep.cluster
    running = frozenset(p.id for p in harness.procs.values() if p.usable)
    # From here on, with asynchronous replication, what the fleet commits may be lost: the
    # fault's window (the checker's excuse for the fleet's evidence) starts here.
    start = _now()
    if not rep.synchronous:
        # The standby falls behind while the fleet goes on committing on the primary.
        cluster.primary.pause_replication()
        await asyncio.sleep(fault.seconds)
    # No enqueue runs across the promotion: the ones acknowledged before it are checked
    # against the new primary before anything can reuse their ids.
    async with harness.enqueue_lock:
        acknowledged = list(harness.seen.enqueued_ids)
        done = await failover(cluster, fault.variant)
        back = _now()
        # Until the rebuild the promoted server is still `cluster.standby`.
        lost = await asyncio.to_thread(_absent, cluster.standby.url(), acknowledged)
    rep.lost_enqueues += lost
    rep.wal_behind.append(done.wal_behind)
    harness.seen.outages.append(Outage("failover", back, running))
    harness.seen.windows.append(Window("failover", None, start, back))
    await asyncio.to_thread(cluster.rejoin_old_primary)
    if rep.synchronous:
        await asyncio.to_thread(cluster.primary.set_synchronous, STANDBY_NAME)
    lag = "" if rep.synchronous else f"after {fault.seconds:.1f}s of replication lag, "
    return (
        f"{lag}promoted in {done.promoted_at - done.at:.1f}s, "
        f"standby {done.wal_behind if done.wal_behind is not None else '?'} bytes behind, "
        f"{len(lost)} acknowledged enqueue(s) lost; old primary rebuilt as standby"
    )


def separate_losses(
    seen: Any,
    events: Iterable[Mapping[str, Any]],
    by_token: Mapping[tuple[int, UUID], Any],
    by_kind: dict[str, list[str]],
    report: Any,
) -> None:
    """Count what replication lost, and with asynchronous replication take the violations
    on the lost jobs out of `by_kind` (they are replication's, not the queue's)."""
    rep: Replication | None = seen.replication
    if rep is None:
        return
    lost_enqueues = set(rep.lost_enqueues)
    # A completion a worker was told of is lost when its attempt row went back with it, or
    # came back still open (the new primary's janitor then ended it as lease_lost).
    lost_completions: set[int] = set()
    lost_attempts: set[int] = set()  # jobs with a reported outcome on an attempt now gone
    for e in events:
        if e.get("event") not in ("completed", "completion_rejected"):
            continue
        key = (int(e["job_id"]), UUID(e["token"]))
        attempt = by_token.get(key)
        if attempt is None:
            lost_attempts.add(key[0])
        if e["event"] == "completed" and (attempt is None or attempt.outcome != "completed"):
            lost_completions.add(key[0])
    # Each entry is one acknowledged job (a lost id may be reused and lost again).
    report.lost_enqueues = len(rep.lost_enqueues)
    # Completions of jobs whose enqueue survived: these jobs ran again.
    report.lost_completions = len(lost_completions - lost_enqueues)
    if rep.synchronous:
        return  # nothing acknowledged may be lost: every violation stays the queue's
    lost_jobs = lost_enqueues | lost_completions | lost_attempts
    excused = 0
    for kind in list(by_kind):
        kept = []
        for detail in by_kind[kind]:
            ids = {int(m) for m in JOB_IN_DETAIL.findall(detail)}
            if ids and ids <= lost_jobs:
                excused += 1
            else:
                kept.append(detail)
        if kept:
            by_kind[kind] = kept
        else:
            del by_kind[kind]
    report.replication_violations = excused
    report.notes.append(
        f"replication (asynchronous): {len(rep.lost_enqueues)} acknowledged enqueues and "
        f"{len(lost_completions)} reported completions lost after failovers "
        f"({report.lost_completions} on jobs whose enqueue survived: they ran again); {excused} "
        f"violation(s) on those jobs counted as replication's (WAL behind at each failover: "
        f"{rep.wal_behind})"
    )
