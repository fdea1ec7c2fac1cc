"""Fleet-wide limits per kind: declared at registration, enforced by the claim of limited
kinds (see `taskboard.core.sql.limits` for how PostgreSQL keeps them)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from taskboard.core import sql
from taskboard.core.base.pipelines import pipeline
from taskboard.core.engine.db_errors import named as _named
from taskboard.core.engine.flights import ClaimPlan
from taskboard.core.engine.leases import _claim_params
from taskboard.core.engine.records import ClaimedJob
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.kinds.registry import KindRegistry

Conn = AsyncConnection[Any]
# How soon a worker looks again at a limited kind whose jobs are due but were not all
# claimable: a running slot frees when another worker finishes (nothing tells this one),
# a rate's next slot after 1/rate seconds.
MAX_LIMITED_WAIT = 0.5
MIN_LIMITED_WAIT = 0.05


def limited_kinds(registry: KindRegistry, kinds: Sequence[str]) -> list[str]:
    """The kinds among `kinds` with a fleet limit, sorted."""
    found = (registry.find(name) for name in kinds)
    return sorted(k.name for k in found if k is not None and k.limited)


def limited_wait(registry: KindRegistry, kinds: Sequence[str]) -> float:
    """Seconds before looking again at due jobs of limited `kinds` (see `MAX_LIMITED_WAIT`)."""
    waits = [MAX_LIMITED_WAIT]
    for name in kinds:
        kind = registry.find(name)
        if kind is not None and kind.rate_per_second:
            waits.append(max(MIN_LIMITED_WAIT, 1 / kind.rate_per_second))
    return min(waits)


async def declare(conn: Conn, registry: KindRegistry) -> None:
    """Write the limits of every kind this process runs (and remove a removed one)."""
    kinds = [k for k in (registry.find(n) for n in registry.runnable()) if k is not None]
    async with _named("SET_KIND_LIMITS"):
        await conn.execute(sql.SET_KIND_LIMITS, {
            "kinds": [k.name for k in kinds],
            "running": [k.max_running for k in kinds],
            "rates": [k.rate_per_second for k in kinds],
        })


class LimitedClaims:
    """One worker's claims of its limited kinds, beside its ordinary claims.

    A claim of limited kinds that came back empty (each kind at its limit, or nothing due)
    is not tried again for `MIN_LIMITED_WAIT`: the claim loop runs after every batch of
    completions, and a transaction each time would cost the other kinds' throughput for
    nothing. A slot freed meanwhile is taken at most that much later.
    """

    def __init__(self, registry: KindRegistry, kinds: Sequence[str]) -> None:
        self.kinds = limited_kinds(registry, kinds)
        self.wait = limited_wait(registry, self.kinds)
        self._quiet_until = 0.0

    async def claim(
        self, conn: Conn, plan: ClaimPlan, claimed: Sequence[ClaimedJob], worker_id: str,
        settings: WorkerSettings, skip: Sequence[int],
    ) -> list[ClaimedJob]:
        """Jobs of limited kinds (those `plan` claims) for the slots the ordinary claim
        left; none when it left none."""
        kinds = [k for k in self.kinds if k in plan.kinds]
        loop = asyncio.get_running_loop()
        if not kinds or len(claimed) >= plan.limit or loop.time() < self._quiet_until:
            return []
        holding = sum(1 for job in claimed if job.kind in plan.db_kinds)
        params = _claim_params(
            worker_id, plan.limit - len(claimed), settings.lease_seconds, settings.queues,
            sorted(kinds), skip, plan.db_kinds, max(0, plan.db_limit - holding),
            plan.kind_leases, plan.max_bytes,
        )
        got = await claim_limited(conn, params)
        if not got:
            self._quiet_until = loop.time() + MIN_LIMITED_WAIT
        return got


async def claim_limited(conn: Conn, params: dict[str, Any]) -> list[ClaimedJob]:
    """Claim jobs of the limited kinds of `params` (`leases._claim_params`), within each
    one's limits: lock, claim, charge, committed together (one round trip on an autocommit
    connection)."""
    if not conn.autocommit:
        raise ValueError("claim_limited needs an autocommit connection")
    async with _named("LOCK_LIMITS + CLAIM_LIMITED + CHARGE_LIMITS"), pipeline(conn):
        await conn.execute(sql.LOCK_LIMITS, params)
        got = conn.cursor(row_factory=class_row(ClaimedJob))
        await got.execute(sql.CLAIM_LIMITED, params)
        await conn.execute(sql.CHARGE_LIMITS, params)
    return await got.fetchall()
