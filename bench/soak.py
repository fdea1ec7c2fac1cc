"""Soak: a long fault-injection run against a PostgreSQL of its own.

    uv run python bench/soak.py --minutes 10 --seed 42

Starts an embedded PostgreSQL in a temporary folder, runs `taskboard worker` processes
against it with one shared SMTP sink and one shared Stripe endpoint, feeds jobs of every
kind for N minutes while injecting random faults (stalls past the lease, SIGKILLs mid
handler and mid send, cut connections, database restarts, SMTP and Stripe failures and
slowness, silently dropped connections, oversized rows, a database time zone change) while
an operator prunes, retries, cancels, pauses the queue, times out billing jobs and keeps
schedules firing (`--no-operator` leaves it out), drains the queue, and prints the
checker's one summary line. The seed is
printed first; the same seed replays the same jobs and the same fault plan.

With `--failover` the fleet runs against a primary and a streaming standby instead
(tests/ha/cluster.py, multi-host URL with `target_session_attrs=read-write`), and every so
often the primary is killed, frozen or turned read-only (in turn) and the standby promoted;
the old primary is rebuilt as the new standby, ready for the next one. Replication is
synchronous, so nothing acknowledged may be lost and 0 violations is the bar. With
`--async-replication` the standby is made to lag before each failover, and the summary
line says what replication lost apart from the queue's violations
(`replication lost: N enqueues, M completions; queue violations: 0`). The other faults act
on the current primary; `drop` is left out (its proxy forwards to one server).

Exit code 0 when the checker found no violation, 1 otherwise (the violations follow the
summary line on stderr). With `--keep` the worker logs, the data folder and report.txt (every
violation, note and fault applied) are kept; their folder is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the harness lives with the tests
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from taskboard.core.engine.schema import migrate  # noqa: E402
from taskboard.core.runtime.embedded import EmbeddedPostgres  # noqa: E402

from tests.faults.checker import Report  # noqa: E402
from tests.faults.failover import FAILOVER_SOAK_WEIGHTS, Replication  # noqa: E402
from tests.faults.harness import FaultConfig, run_faults  # noqa: E402
from tests.faults.operators import OperatorConfig  # noqa: E402
from tests.faults.server import freeze_server, stop_postgres  # noqa: E402
from tests.ha.cluster import Cluster, running_cluster  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, required=True, help="how long to inject faults")
    p.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    p.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    p.add_argument("--lease", type=float, default=2.0, help="lease seconds (default 2)")
    p.add_argument("--rate", type=float, default=30.0, help="jobs per second fed (default 30)")
    p.add_argument("--mean-gap", type=float, default=2.0,
                   help="mean seconds between faults (default 2)")
    p.add_argument("--operator-gap", type=float, default=1.0,
                   help="mean seconds between operator actions (default 1)")
    p.add_argument("--no-operator", action="store_true",
                   help="no operator actions (faults only, as before issue 22)")
    p.add_argument("--failover", action="store_true",
                   help="run against a primary and a standby, failing over now and then")
    p.add_argument("--async-replication", action="store_true",
                   help="with --failover: asynchronous replication (what it loses is reported)")
    p.add_argument("--keep", action="store_true", help="keep the data folder and worker logs")
    return p


def _config(args: argparse.Namespace, seed: int) -> FaultConfig:
    seconds = args.minutes * 60
    return FaultConfig(
        seed=seed,
        workers=args.workers,
        jobs=max(100, int(args.rate * seconds)),
        lease=args.lease,
        fault_counts=None,
        duration=seconds,
        mean_gap=args.mean_gap,
        settle_timeout=180.0,
        recovery_timeout=30.0,
        operator=None if args.no_operator else OperatorConfig(gap=args.operator_gap),
        weights=FAILOVER_SOAK_WEIGHTS if args.failover else None,
    )


def _finish(report: Report, args: argparse.Namespace, workdir: Path) -> int:
    print(report.summary_line(), flush=True)
    if not report.ok:
        print(report.details(), file=sys.stderr)
    if args.keep:  # the whole story: violations, notes, every fault applied and when
        (workdir / "report.txt").write_text(report.details() + "\n")
    return 0 if report.ok else 1


async def soak_failover(args: argparse.Namespace, workdir: Path, cluster: Cluster) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    replication = Replication(cluster, synchronous=not args.async_replication)
    report = await run_faults(cluster.url, _config(args, seed), workdir / "logs",
                              restart=replication.restart_primary,
                              freeze=replication.freeze_primary,
                              echo=lambda line: print(line, file=sys.stderr, flush=True),
                              replication=replication)
    return _finish(report, args, workdir)


async def soak(args: argparse.Namespace, workdir: Path) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    server = EmbeddedPostgres(workdir / "pgdata")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        url = await asyncio.to_thread(server.start)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn)
        report = await run_faults(url, _config(args, seed), workdir / "logs", restart=server.restart,
                                  freeze=lambda s: freeze_server(workdir / "pgdata", s),
                                  echo=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(stop_postgres, workdir / "pgdata")
    return _finish(report, args, workdir)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (args.minutes <= 0 or args.workers < 1 or args.lease <= 0 or args.rate <= 0
            or args.operator_gap <= 0):
        print("soak: error: --minutes, --workers, --lease, --rate and --operator-gap must be"
              " positive",
              file=sys.stderr)
        return 2
    if args.async_replication and not args.failover:
        print("soak: error: --async-replication needs --failover", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="taskboard-soak-"))
    try:
        if args.failover:
            # Made outside the event loop: the cluster's template migrates with its own.
            with running_cluster() as cluster:
                return asyncio.run(soak_failover(args, workdir, cluster))
        return asyncio.run(soak(args, workdir))
    finally:
        if args.keep:
            print(f"soak: logs and data kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
