"""The server's CPU per no-op job for the engine's own claim and grouped completion, measured
on the backend process itself (psutil), so other load on the host barely moves it.

One connection with generic plans (as the engine's sessions force), `--pending` jobs, then
150 rounds of CLAIM (100 rows) and COMPLETE_MANY of those rows, each committed; the first 20
rounds warm up. Prints the backend's CPU per job for each statement, the server time per job
pg_stat_statements saw (every statement, the triggers' own included), the WAL written per job,
and the job table's updates and how many of them were HOT (pg_stat_user_tables).

    uv run --group bench python bench/backend_cpu.py [--taskboard-root A --taskboard-root B]
        [--pairs 3] [--analyze] [--held N] [--off TRIGGER,...] [--attempts-off]
        [--perf FOLDER]

With several `--taskboard-root`, each pair of runs measures every checkout once, one after
the other on the same server (each on a fresh database with its own migrations), and the
summary gives the median over the pairs: an interleaved A/B that load on the host moves
alike. `--analyze` runs VACUUM ANALYZE after the enqueue (the plans autovacuum's statistics
give a table of pending jobs of one kind); `--held N` keeps N more jobs leased by another
worker throughout (what other workers' in-flight jobs add to each statement). `--off`
disables triggers of taskboard_jobs by name and `--attempts-off` every trigger of
taskboard_attempts (what they cost). `--perf FOLDER` records the backend with
`perf record -g` during the measured rounds (one perf.data per run in FOLDER; read it with
`perf report --no-children -i FILE`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
from common import RUNNERS_DIR, BenchServer, log

ROUNDS, WARM, BATCH = 150, 20, 100


def _cpu(proc: psutil.Process) -> float:
    """The process's CPU seconds: the scheduler's nanosecond count where Linux has it (the
    tick-sampled user/system times are 10 ms grains, coarser than a claim)."""
    try:
        return int(Path(f"/proc/{proc.pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        t = proc.cpu_times()
        return t.user + t.system


def _statements(conn: psycopg.Connection[Any]) -> list[tuple[str, int, float]]:
    """(statement's first words, calls, ms) of this database since the reset, costliest first."""
    rows = conn.execute(
        "SELECT regexp_replace(left(ltrim(query, E' \\n'), 60), '\\s+', ' ', 'g'), calls,"
        "       total_exec_time FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        "   AND query NOT LIKE '%%pg_stat_statements%%'"
        " ORDER BY total_exec_time DESC").fetchall()
    return [(str(q), int(c), float(t)) for q, c, t in rows]


async def _migrate(url: str) -> None:
    from taskboard.core.engine.schema import migrate

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
        await migrate(aconn)


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run on the (empty) database at `url`, with the imported checkout's statements."""
    from psycopg import sql as pgsql
    from taskboard.core import sql
    from taskboard.core.engine.leases import _claim_params, _completion_params

    asyncio.run(_migrate(url))
    jobs = args.pending
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', false)")
        conn.execute(
            "INSERT INTO taskboard_jobs (kind, payload) SELECT 'noop', '{}'::jsonb"
            " FROM generate_series(1, %s)", (jobs + args.held,))
        # No ANALYZE unless asked: a young table, as in a short run.
        conn.execute("VACUUM ANALYZE taskboard_jobs" if args.analyze else "VACUUM taskboard_jobs")
        for trigger in filter(None, args.off.split(",")):
            conn.execute(pgsql.SQL("ALTER TABLE taskboard_jobs DISABLE TRIGGER {}").format(
                pgsql.Identifier(trigger)))
        if args.attempts_off:
            conn.execute("ALTER TABLE taskboard_attempts DISABLE TRIGGER ALL")
        if args.held:
            # Another worker's in-flight jobs, leased for longer than the run.
            conn.execute(sql.CLAIM, _claim_params("other", args.held, 3600.0, ["default"],
                                                  ["noop"], []), prepare=False).fetchall()
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        proc = psutil.Process(row[0])
        batch = args.batch
        params = _claim_params("bench", batch, 60.0, ["default"], ["noop"], [])
        claim_cpu = done_cpu = 0.0
        claim_us: list[float] = []
        done_us: list[float] = []
        perf: subprocess.Popen[bytes] | None = None
        claimed = 0
        for i in range(ROUNDS):
            if i == WARM:
                conn.execute("SET pg_stat_statements.track = 'all'")
                conn.execute("SELECT pg_stat_statements_reset()")
                lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
                if args.perf:
                    perf = subprocess.Popen(
                        ["perf", "record", "-q", "-F", "4999", "--call-graph", "dwarf,16384", "-p", str(row[0]), "-o",
                         str(Path(args.perf) / f"{args.label}.data")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(0.5)  # perf attaches
            c0, w0 = _cpu(proc), time.perf_counter()
            rows = conn.execute(sql.CLAIM, params, prepare=True).fetchall()
            c1, w1 = _cpu(proc), time.perf_counter()
            held = [(r[0], r[7]) for r in rows]
            done = _completion_params(held, [(0.001, 59.0)] * len(held))
            conn.execute(sql.COMPLETE_MANY, done, prepare=True).fetchall()
            c2, w2 = _cpu(proc), time.perf_counter()
            if i >= WARM:
                claimed += len(rows)
                claim_cpu += c1 - c0
                done_cpu += c2 - c1
                claim_us.append((w1 - w0) / batch * 1e6)
                done_us.append((w2 - w1) / batch * 1e6)
        if perf is not None:
            perf.send_signal(2)
            perf.wait(60)
        wal = conn.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn,"
                           " pg_current_wal_insert_lsn()::text",
                           (lsn[0] if lsn else "0/0",)).fetchone()
        log(f"{args.label}: WAL of the measured rounds {lsn[0] if lsn else '?'} .. "
            f"{wal[1] if wal else '?'} (pg_waldump --stats=record)")
        conn.execute("SET pg_stat_statements.track = 'top'")
        conn.execute("SELECT pg_stat_force_next_flush()")
        statements = _statements(conn)
        stats = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
            " WHERE relname = 'taskboard_jobs'").fetchone()
    if claimed != (ROUNDS - WARM) * batch:
        raise SystemExit(f"claimed {claimed} jobs in the measured rounds, expected "
                         f"{(ROUNDS - WARM) * batch}: raise --pending")
    return {
        "claim_cpu_us": claim_cpu / claimed * 1e6, "done_cpu_us": done_cpu / claimed * 1e6,
        "claim_wall_us": statistics.median(claim_us), "done_wall_us": statistics.median(done_us),
        "statements": statements, "jobs": claimed,
        "wal_bytes": float(wal[0]) / claimed if wal else 0.0,
        "updates": stats[0] if stats else None, "hot": stats[1] if stats else None,
    }


def _child(args: argparse.Namespace) -> None:
    """One run in this process (`--one URL`), its result as one JSON line on stdout."""
    print(json.dumps(measure(args.one, args)), flush=True)


def _run(server: BenchServer, root: str | None, label: str,
         args: argparse.Namespace) -> dict[str, Any]:
    name, url = server.fresh_database("backend_cpu")
    try:
        passed = [a for a in sys.argv[1:] if a != "--taskboard-root"
                  and a not in args.taskboard_root]
        rooted = [str(RUNNERS_DIR / "rooted.py"), root] if root else []
        cmd = [sys.executable, *rooted, str(Path(__file__).resolve()), *passed,
               "--one", url, "--label", label]
        out = subprocess.run(cmd, check=False, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)})
        if out.returncode != 0:
            raise SystemExit(f"{label}: the run failed\n{out.stderr[-3000:]}")
        for line in out.stderr.splitlines():
            if line.startswith("[bench"):
                print(line, file=sys.stderr)
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.drop_database(name)


def _label(root: str | None) -> str:
    if root is None:
        return "this checkout"
    from systems import checkout_label

    return checkout_label(root)


def _median(runs: list[dict[str, Any]], key: str) -> str:
    values = [float(r[key]) for r in runs]
    return (f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"
            if len(values) > 1 else f"{values[0]:.1f}")


def main(args: argparse.Namespace) -> None:
    roots: list[str | None] = list(args.taskboard_root) or [None]
    labels = [_label(r) for r in roots]
    if args.perf:
        Path(args.perf).mkdir(parents=True, exist_ok=True)
    server = BenchServer()
    server.start()
    results: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(roots))}
    try:
        for pair in range(args.pairs):
            for i, root in enumerate(roots):
                tag = f"{labels[i].replace('@', '-').replace(' ', '-')}-{pair + 1}"
                r = _run(server, root, tag, args)
                results[i].append(r)
                log(f"{labels[i]} pair {pair + 1}: claim {r['claim_cpu_us']:.1f} us/job, "
                    f"completion {r['done_cpu_us']:.1f} us/job (backend CPU), "
                    f"updates {r['updates']} HOT {r['hot']}")
    finally:
        server.stop()
    load = os.getloadavg()
    print(f"\n### Backend CPU per job, claim + completion ({ROUNDS - WARM} rounds of {args.batch}, "
          f"{args.pending} pending{', ANALYZEd' if args.analyze else ''}"
          f"{f', {args.held} held by another worker' if args.held else ''}; "
          f"median (min-max) of {args.pairs}; load average at the end "
          f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f})\n")
    print("| checkout | claim CPU us/job | completion CPU us/job | both | claim wall us/job "
          "| completion wall us/job | server time us/job (pg_stat_statements) "
          "| WAL bytes/job | HOT updates |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, runs in results.items():
        for r in runs:
            r["both"] = r["claim_cpu_us"] + r["done_cpu_us"]
            top = [s for s in r["statements"] if s[0].startswith(("WITH", "SELECT", "INSERT",
                                                                   "UPDATE", "DELETE"))]
            r["server_us"] = sum(t for _, _, t in top[:2]) * 1000 / r["jobs"]
        print(f"| {labels[i]} | {_median(runs, 'claim_cpu_us')} | {_median(runs, 'done_cpu_us')}"
              f" | {_median(runs, 'both')} | {_median(runs, 'claim_wall_us')}"
              f" | {_median(runs, 'done_wall_us')} | {_median(runs, 'server_us')}"
              f" | {_median(runs, 'wal_bytes')} | {runs[-1]['hot']} of {runs[-1]['updates']} |")
    print("\nStatements of the last run of each checkout (pg_stat_statements, track = all: a "
          "trigger's statements listed apart from, and also inside, the statement firing it), "
          "server us per job:\n")
    for i, runs in results.items():
        print(f"- {labels[i]}: " + "; ".join(
            f"`{q}` {t * 1000 / runs[-1]['jobs']:.1f} ({c} calls)"
            for q, c, t in runs[-1]["statements"][:8]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taskboard-root", action="append", default=[], metavar="PATH",
                        help="a checkout to measure (repeat: interleaved A/B)")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each checkout")
    parser.add_argument("--pending", type=int, default=15_000, help="jobs enqueued first")
    parser.add_argument("--batch", type=int, default=BATCH, help="jobs per claim (default 100)")
    parser.add_argument("--analyze", action="store_true", help="VACUUM ANALYZE after enqueue")
    parser.add_argument("--held", type=int, default=0,
                        help="jobs kept leased by another worker during the run")
    parser.add_argument("--off", default="", help="taskboard_jobs triggers to disable")
    parser.add_argument("--attempts-off", action="store_true",
                        help="disable every trigger of taskboard_attempts")
    parser.add_argument("--perf", default="", metavar="FOLDER",
                        help="perf record -g the backend into FOLDER")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)
    parser.add_argument("--label", default="run", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.one:
        _child(parsed)
    else:
        main(parsed)
