"""Taskboard job kinds used only by the benchmarks.

The harness validates enqueued payloads with the same registry the worker runs, so both
import this module. `noop` and `sleep` are Taskboard's built-ins; these add a start report
(`probe`, `hold`), a CPU-busy handler for the renewal-lateness measurement and `bench_io`
(awaits `ms` milliseconds, reporting its start when keyed: bench/issue25.py's workload).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import protocol

# An older checkout (before core/ was regrouped) first: see tb_client.py.
try:
    from taskboard.core.errors import ValidationError  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:
    from taskboard.core.base.errors import ValidationError
from taskboard.core.kinds import JobContext, JobKind, KindRegistry, builtin_registry


def _keyed(payload: Any) -> dict[str, Any]:
    key = payload.get("key")
    if not isinstance(key, str) or not key:
        raise ValidationError("must be a non-empty string", field="key")
    seconds = float(payload.get("seconds", 0.0))
    return {"key": key, "seconds": seconds}


async def _probe(ctx: JobContext) -> None:
    protocol.started(ctx.payload["key"])


async def _hold(ctx: JobContext) -> None:
    # Reports its start, then holds the lease for `seconds`, checking in at every step
    # like the built-in sleep so a lost lease stops it.
    protocol.started(ctx.payload["key"])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.payload["seconds"]
    while loop.time() < deadline:
        await ctx.checkpoint()
        await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))


def _io_payload(payload: Any) -> dict[str, Any]:
    ms = float(payload.get("ms", 10.0))
    key = payload.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        raise ValidationError("must be a non-empty string", field="key")
    return {"ms": ms, **({"key": key} if key else {})}


async def _io(ctx: JobContext) -> None:
    # The shape of an SMTP or HTTP call: the handler awaits I/O and holds no connection.
    # Keyed jobs report their start (pickup latency); the others print nothing.
    key = ctx.payload.get("key")
    if key:
        protocol.started(key)
    await asyncio.sleep(ctx.payload["ms"] / 1000)


def _busy_payload(payload: Any) -> dict[str, Any]:
    return {"seconds": float(payload.get("seconds", 1.0)),
            "slice_ms": float(payload.get("slice_ms", 2.0))}


async def _busy(ctx: JobContext) -> None:
    # Burns CPU in slices and yields between them: the event loop is never idle, which is
    # what a handler doing real work (parsing, rendering) looks like to the renewal timer.
    seconds = ctx.payload["seconds"]
    slice_s = ctx.payload["slice_ms"] / 1000
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stop = min(end, time.monotonic() + slice_s)
        while time.monotonic() < stop:
            pass
        await asyncio.sleep(0)
        await ctx.checkpoint()


PROBE = JobKind("bench_probe", _keyed, _probe)
HOLD = JobKind("bench_hold", _keyed, _hold)
BUSY = JobKind("bench_busy", _busy_payload, _busy)
IO = JobKind("bench_io", _io_payload, _io)


def bench_registry() -> KindRegistry:
    """Taskboard's built-in kinds plus the bench kinds."""
    registry = builtin_registry()
    for kind in (PROBE, HOLD, BUSY, IO):
        registry.register(kind)
    return registry
