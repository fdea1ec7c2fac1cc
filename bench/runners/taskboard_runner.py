"""One Taskboard worker process for the benchmarks.

The same `Worker` the `taskboard worker` CLI runs, with the bench kinds registered. Two
things the CLI adds are left out because they are not the engine: the JSON line per event
on stderr, and the embedded SMTP/Stripe stand-ins (no-op jobs need neither).
SIGTERM drains, as in the CLI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

import protocol
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker

# An older checkout (before core/ was regrouped) first: see tb_client.py.
try:
    from taskboard.core.event_loop import runner  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:
    from taskboard.core.runtime.event_loop import runner
from tb_kinds import bench_registry


def trace_to_nowhere() -> None:
    """An OpenTelemetry SDK that records every span and exports it to nothing: what tracing
    costs the worker itself, without any collector's cost (throughput.py --tracing)."""
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


async def main(args: argparse.Namespace) -> None:
    if args.tracing == "sdk":
        trace_to_nowhere()
    settings = WorkerSettings(
        lease_seconds=args.lease,
        pool_size=args.pool_size,
        poll_seconds=args.poll,
        **({"concurrency": args.concurrency} if args.concurrency is not None else {}),
        worker_id=args.id,
    )
    worker = Worker(args.url, registry=bench_registry(), settings=settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, worker.drain)
    task = loop.create_task(worker.run())
    await worker.wait_started()
    protocol.ready()
    await task


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--lease", type=float, default=60.0)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--poll", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=None,
                        help="jobs at once (default: the engine's)")
    parser.add_argument("--tracing", choices=("none", "sdk"), default="none",
                        help="sdk: an OpenTelemetry SDK recording every span, exporting nowhere")
    # The loop the `taskboard worker` command runs on (uvloop where installed).
    runner()(main(parser.parse_args()))
