"""The built-in kinds: `noop`, `sleep`, and the registry that also holds `email` and `billing`."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from taskboard.core.base.errors import ValidationError
from taskboard.core.kinds.billing import BILLING
from taskboard.core.kinds.email import EMAIL
from taskboard.core.kinds.registry import JobContext, JobKind, JsonObject, KindRegistry


def _no_fields(payload: Any) -> JsonObject:
    if payload:
        raise ValidationError(f"noop takes no fields, got {sorted(payload)}", field="payload")
    return {}


async def _noop(ctx: JobContext) -> None:
    return None


SLEEP_STEP_SECONDS = 0.05
SLEEP_MAX_SECONDS = 24 * 3600.0


def _sleep_payload(payload: Any) -> JsonObject:
    extra = set(payload) - {"seconds"}
    if extra:
        raise ValidationError(f"unknown fields {sorted(extra)}", field="payload")
    seconds = payload.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValidationError("must be a number of seconds", field="seconds")
    if isinstance(seconds, int) and abs(seconds) > SLEEP_MAX_SECONDS:
        seconds = math.inf  # math.isfinite would overflow on a huge int
    if not math.isfinite(seconds) or seconds < 0 or seconds > SLEEP_MAX_SECONDS:
        raise ValidationError(f"must be between 0 and {SLEEP_MAX_SECONDS:g}", field="seconds")
    return {"seconds": float(seconds)}


async def _sleep(ctx: JobContext) -> None:
    # Small steps so a paused worker's handler stops within a step and a lost lease is
    # noticed quickly; one long sleep would hide both.
    remaining = float(ctx.payload["seconds"])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + remaining
    while True:
        await ctx.checkpoint()
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(SLEEP_STEP_SECONDS, left))


NOOP = JobKind("noop", _no_fields, _noop)
SLEEP = JobKind("sleep", _sleep_payload, _sleep)


def builtin_registry() -> KindRegistry:
    """A registry holding the built-in kinds: noop, sleep, email and billing."""
    registry = KindRegistry()
    for kind in (NOOP, SLEEP, EMAIL, BILLING):
        registry.register(kind)
    return registry
