"""`taskboard advise`'s verdict on a kind's lease, judged by what a lease is for.

A lease must outlast the longest stretch its holder goes without a renewal (the renewal
interval plus any stall: a pause, a slow network, a busy loop), with room to spare; and a
crashed worker's job waits up to a lease before it runs again, so it must not be longer
than the recovery time the operator accepts. How long the handler runs does not matter:
renewals carry a long handler. The stretch is read from the least lease time left at a
renewal (`min_margin_seconds`), recorded per attempt.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

from taskboard.core.kinds.registry import JobKind, KindRegistry
from taskboard.core.view.board import KindAdvice, KindLimitRow

DEFAULT_RECOVERY_SECONDS = 60.0
MIN_SUGGESTED_LEASE = 10.0
# The part of a lease that must be left at the worst renewal seen: with a renewal every
# third of the lease, a stall S leaves a fifth when the lease is S / (2/3 - 1/5) ≈ 2.14 S.
SPARE_FRACTION = 0.2
STALL_FACTOR = 1 / (2 / 3 - SPARE_FRACTION)

RULE = (
    "seconds; margin: least lease time left at a renewal; stall: how much later than its "
    "interval (a third of the lease) the latest renewal came. too short: a renewal found "
    "less than a fifth of the lease left; too long: over the recovery time you accept "
    "(--recovery), the longest a crashed worker's job waits; suggested: 2.14x the worst "
    "stall, at least 10 s. Handler durations do not decide: renewals carry long handlers."
)


@dataclass(frozen=True)
class Judgement:
    kind: str
    lease: float
    stall: float | None  # seconds past the renewal interval, at the worst renewal seen
    verdict: str  # ok | too short | too long | conflict
    suggested_lease: float | None
    reason: str
    set_by: str  # the flag or line of code that sets this kind's lease


def judge(
    row: KindAdvice, kind: JobKind | None, *, worker_lease: float | None = None,
    recovery: float = DEFAULT_RECOVERY_SECONDS,
) -> Judgement:
    """The verdict on `row`'s kind (`kind`: its registration here, if any)."""
    own = kind.lease_seconds if kind is not None else None
    lease = own if own is not None else (worker_lease or row.lease)
    stall = None
    if row.least_margin is not None:
        stall = max(0.0, (lease - row.least_margin) - lease / 3)
    needed = max(MIN_SUGGESTED_LEASE, math.ceil(STALL_FACTOR * stall)) if stall else None
    set_by = where_set(row.kind, kind, lease, own is not None)

    def verdict(word: str, suggested: float | None, reason: str) -> Judgement:
        return Judgement(row.kind, lease, stall, word, suggested, reason, set_by)

    short = row.least_margin is not None and row.least_margin < lease * SPARE_FRACTION
    if short:
        suggested = needed or MIN_SUGGESTED_LEASE
        if suggested > recovery:
            return verdict("conflict", suggested,
                           f"stalls of {stall:.1f} s need {suggested:g} s, over the "
                           f"{recovery:g} s recovery accepted: find the stalls")
        return verdict("too short", suggested,
                       f"a renewal found {row.least_margin:.1f} s of {lease:g} s left")
    if lease > recovery:
        suggested = min(recovery, max(needed or MIN_SUGGESTED_LEASE, MIN_SUGGESTED_LEASE))
        return verdict("too long", suggested,
                       f"a crashed worker's job waits {lease:g} s; {recovery:g} s accepted")
    if row.least_margin is None:
        return verdict("ok", None, "no renewal seen: each attempt ended within an interval")
    return verdict("ok", None, f"worst stall {stall:.1f} s leaves "
                   f"{row.least_margin:.1f} s of {lease:g} s")


def where_set(name: str, kind: JobKind | None, lease: float, own: bool) -> str:
    """The line of code or the flag that sets the kind's lease."""
    place = _defined_at(kind)
    if own:
        return f"lease_seconds={lease:g} in the kind's registration ({place or name})"
    there = f" at {place}" if place else ""
    return (f"taskboard worker --lease {lease:g} (its workers' flag); its own: "
            f"registry.kind({name!r}, lease_seconds=N){there}")


def _defined_at(kind: JobKind | None) -> str | None:
    if kind is None or kind.handler is None:
        return None
    handler = inspect.unwrap(kind.handler)
    try:
        path = inspect.getsourcefile(handler)
        _, line = inspect.getsourcelines(handler)
    except (OSError, TypeError):
        return None
    return f"{path}:{line}" if path else None


@dataclass(frozen=True)
class KindPolicies:
    """A kind's policies (its `JobKind` fields, or the workers' defaults) and fleet limits,
    beside what `advise` recommends for it: the dashboard's lease advice, one per kind."""

    kind: str
    lease: float  # what its jobs are leased for
    own_lease: bool  # set by the kind (else the workers' --lease)
    timeout: float | None  # the kind's, None: none
    max_attempts: int | None  # the kind's, None: the enqueue default
    max_running: int | None  # fleet-wide, from taskboard_kind_limits
    rate_per_second: float | None
    running: int  # leases of the kind held now (limited kinds only)
    waiting: int  # due jobs waiting on the limit
    timings: KindAdvice | None  # its recorded attempts; None: none yet
    judgement: Judgement | None  # `advise`'s verdict; None without timings


def kind_policies(
    registry: KindRegistry, rows: list[KindAdvice], limits: list[KindLimitRow], *,
    worker_lease: float, recovery: float = DEFAULT_RECOVERY_SECONDS,
) -> list[KindPolicies]:
    """Every kind this process knows, has timings of or sees a limit on, sorted by name.
    The verdicts are `taskboard advise`'s (`judge` on the same rows, without a worker
    lease: the recorded one), so the dashboard and the command agree."""
    timings = {r.kind: r for r in rows}
    limited = {limit.kind: limit for limit in limits}
    out = []
    for name in sorted(set(registry.runnable()) | set(timings) | set(limited)):
        kind = registry.find(name)
        row = timings.get(name)
        limit = limited.get(name)
        judgement = judge(row, kind, recovery=recovery) if row is not None else None
        own = kind.lease_seconds if kind is not None else None
        lease = (judgement.lease if judgement is not None else own) or worker_lease
        out.append(KindPolicies(
            name, lease, own is not None,
            kind.timeout if kind is not None else None,
            kind.max_attempts if kind is not None else None,
            limit.max_running if limit is not None else None,
            limit.rate_per_second if limit is not None else None,
            limit.running if limit is not None else 0,
            limit.waiting if limit is not None else 0,
            row, judgement,
        ))
    return out
