"""Kinds for `bench/limits.py`: the built-in no-op kind alone, or beside a kind under a
fleet-wide rate limit (whose jobs wait on it for the whole run)."""

from __future__ import annotations

from taskboard.core.kinds import JobContext, builtin_registry

alone = builtin_registry()
beside = builtin_registry()


@beside.kind("paced", rate_per_second=5)
async def paced(ctx: JobContext) -> None:
    """A relay's pace: five a second, fleet-wide."""
