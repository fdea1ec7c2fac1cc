"""What Taskboard's tracing calls cost per job on the worker's CPU, with no database: the
enqueue span (and the context it stores) and an attempt's span from start to outcome.

Three rows, each in a fresh interpreter (the global tracer provider is set once per
process): the calls stubbed out (the floor), the API with no SDK (what every install pays),
and an SDK that records every span and exports it nowhere (what tracing costs the process,
before any exporter's own cost). The job-throughput side of the same question is
`throughput.py --tracing`.

    uv run python bench/tracing_cost.py [--n 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

MODES = ("stubbed", "api, no SDK", "SDK exporting nowhere")


@dataclass(frozen=True)
class _Job:
    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    ordinal: int
    token: uuid.UUID
    previous_worker: str | None
    traceparent: str | None
    tracestate: str | None

    @property
    def is_reclaim(self) -> bool:
        return False


@dataclass(eq=False)
class _Flight:
    job: _Job
    lost: str | None = None


def _sdk() -> None:
    from collections.abc import Sequence

    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Nowhere(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Nowhere()))
    trace.set_tracer_provider(provider)


def measure(mode: str, n: int) -> dict[str, float]:
    """Microseconds per call of each path in this process."""
    if mode == MODES[2]:
        _sdk()
    from taskboard.core.base import tracing, tracing_attempts
    from taskboard.core.queue.jobs import NewJob

    one, hundred = [NewJob("noop")], [NewJob("noop")] * 100
    out: dict[str, float] = {}

    start = time.perf_counter()
    carried = []
    for i in range(n):
        if mode == MODES[0]:
            carried.append(tracing.NOT_TRACED)
            continue
        with tracing.enqueuing(one) as span:
            carried.append(span.carried)
            span.enqueued([i])
    out["enqueue span, per job enqueued alone"] = (time.perf_counter() - start) / n * 1e6

    start = time.perf_counter()
    for _ in range(n // 100):
        if mode == MODES[0]:
            continue
        with tracing.enqueuing(hundred) as span:
            span.enqueued(list(range(100)))
    out["enqueue span, per job in a batch of 100"] = (time.perf_counter() - start) / n * 1e6

    flights = [
        _Flight(_Job(i, "noop", "default", 1, 5, 1, uuid.uuid4(), None,
                     carried[i]["traceparent"], carried[i]["tracestate"]))
        for i in range(n)
    ]
    start = time.perf_counter()
    for flight in flights:
        if mode == MODES[0]:
            continue
        with tracing_attempts.attempt_started(flight, worker_id="w", lease_seconds=60.0):
            pass
        tracing_attempts.attempt_ended(flight, "completed", "", None)
    out["attempt span, start to outcome"] = (time.perf_counter() - start) / n * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000, help="calls per path (default 100,000)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.n)))
        return
    rows = {}
    for mode in MODES:
        got = subprocess.run([sys.executable, __file__, "--n", str(args.n), "--mode", mode],
                             capture_output=True, text=True, check=True)
        rows[mode] = json.loads(got.stdout)
    paths = list(next(iter(rows.values())))
    print(f"### Tracing calls, microseconds per job ({args.n:,} calls each, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC)\n")
    print("| path | " + " | ".join(MODES) + " |")
    print("|---|" + "---|" * len(MODES))
    for path in paths:
        print(f"| {path} | " + " | ".join(f"{rows[m][path]:.2f}" for m in MODES) + " |")


if __name__ == "__main__":
    main()
