"""`taskboard advise` judges a lease by renewal stalls and the recovery time accepted, not by
the handler's duration, and names what sets it."""

from __future__ import annotations

from taskboard.core.kinds import KindRegistry
from taskboard.core.view.board import KindAdvice
from taskboard.core.view.lease_judgement import judge


def advice(kind: str, p99: float, margin: float | None, lease: float = 60.0) -> KindAdvice:
    return KindAdvice(kind, 100, p99 / 2, p99, p99, margin, lease)


def test_a_long_handler_whose_renewals_kept_their_margin_is_ok() -> None:
    # The case: p99 90 s under a 60 s lease, renewals kept 40 s: nothing to change.
    j = judge(advice("sleep", 90.0, 40.0), None)
    assert (j.verdict, j.suggested_lease, j.stall) == ("ok", None, 0.0)


def test_quick_kinds_under_the_default_lease_are_not_called_too_long() -> None:
    j = judge(advice("email", 0.8, None), None)
    assert j.verdict == "ok" and "no renewal seen" in j.reason


def test_a_stall_that_ate_the_lease_asks_for_a_lease_it_leaves_a_fifth_of() -> None:
    # A 21 s lease renewed every 7 s; one renewal found 2 s left: a stall of 12 s.
    j = judge(advice("billing", 1.0, 2.0, lease=21.0), None)
    assert j.verdict == "too short" and j.stall == 12.0
    assert j.suggested_lease == 26  # 12 / (2/3 - 1/5) rounded up: leaves a fifth
    # Over the recovery the operator accepts: the stalls must be fixed, not the lease.
    assert judge(advice("billing", 1.0, 2.0, lease=21.0), None, recovery=25).verdict == (
        "conflict")


def test_a_lease_over_the_accepted_recovery_is_too_long() -> None:
    j = judge(advice("noop", 0.01, None, lease=600.0), None, recovery=60)
    assert (j.verdict, j.suggested_lease) == ("too long", 10.0)


def test_it_names_the_flag_or_the_line_of_code_that_sets_the_lease() -> None:
    registry = KindRegistry(builtins=False)

    @registry.kind("own", lease_seconds=5)
    async def own(ctx: object) -> None: ...

    @registry.kind("default")
    async def default(ctx: object) -> None: ...

    mine = judge(advice("own", 1.0, 4.0, lease=60.0), registry.find("own"))
    assert mine.lease == 5  # the kind's own, not its workers'
    line = own.__code__.co_firstlineno  # the decorator's line (registry.kind)
    assert mine.set_by == f"lease_seconds=5 in the kind's registration ({__file__}:{line})"
    theirs = judge(advice("default", 1.0, None), registry.find("default"))
    assert theirs.set_by.startswith("taskboard worker --lease 60 (its workers' flag); its own: "
                                    "registry.kind('default', lease_seconds=N) at ")
