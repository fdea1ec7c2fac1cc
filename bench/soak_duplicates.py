"""Duplicate effects per reclaim in a kept soak (`bench/soak.py --keep`), counted from the
external side: what the SMTP sink received and what the Stripe endpoint was asked and
charged, beside the reclaims of `email` and `billing` jobs the database recorded.

    uv run python bench/soak_duplicates.py /tmp/taskboard-soak-XXXX [--json]

A kept soak folder holds `pgdata/` (the run's database: copied to a temporary folder and
started there, so the kept folder stays as it was), `report.txt` (the checker's summary:
`emails=` and `charges=` are the sink's and the endpoint's totals, `dup_emails=` the email
jobs the sink got more than one copy of) and `logs/` (one log per worker). The sink and the
endpoint live in the harness process only; since wp-gaps the harness also writes what they
saw to `logs/external.jsonl` (every message, request and charge). A soak kept by an older
commit has only the totals, so for it the per-job figures are derived (each line says how):
duplicate sends are the sink's total minus the email jobs that got mail (completed, or with
a send record), duplicate charges come from the checker's "charged twice" violations (it
compares the endpoint's charges per job), and PaymentIntents per job from the workers'
charge records (one row per intent).
`--totals-only` counts a newer soak that way too, to compare like with like.

A reclaim is a claim that took a job over from an attempt that lost its lease (the earlier
attempt's row says `lease_lost` or `completion_rejected`, or a claim superseded it), counted
over the attempt rows that remain and those the run's prunes deleted (the harness keeps a
copy of each in `taskboard_fault_deleted`). Run it on a soak of the commit before durable
steps and on one after, with the same seed, to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import subprocess
import sys
import tempfile
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from taskboard.core.runtime.embedded import EmbeddedPostgres

EXTERNAL = Path("logs") / "external.jsonl"
CREATE_PATH = "/v1/payment_intents"
KINDS = ("email", "billing")
EXIT_USAGE = 2
EXIT_STATE = 3


@dataclass
class Jobs:
    """What the database says of the run's jobs of the kinds counted here."""

    kind: dict[int, str] = field(default_factory=dict)
    completed: set[int] = field(default_factory=set)
    reclaims: Counter[int] = field(default_factory=Counter)  # job id: reclaims
    mailed: set[int] = field(default_factory=set)  # email jobs with a send record
    intents: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))

    def of(self, kind: str) -> set[int]:
        return {i for i, k in self.kind.items() if k == kind}


@dataclass
class External:
    """What the sink and the endpoint saw, per job."""

    copies: Counter[int] = field(default_factory=Counter)  # email job: messages received
    new_intents: Counter[int] = field(default_factory=Counter)  # creates Stripe executed
    replayed_creates: Counter[int] = field(default_factory=Counter)  # answered from the key
    charges: Counter[int] = field(default_factory=Counter)
    unattributed: int = 0  # messages or requests with no job header


def parse_summary(text: str) -> dict[str, int]:
    """The integer fields of report.txt's first line (`emails=12 dup_emails=1 ...`)."""
    first = text.splitlines()[0] if text else ""
    return {k: int(v) for k, v in re.findall(r"\b(\w+)=(\d+)\b", first)}


_TWICE = re.compile(r"^VIOLATION billing charged twice for one job x(\d+): (.*)$")


def charged_twice(report: str) -> int:
    """Charges beyond the first per job, from the checker's violation line (the checker
    compares the endpoint's charges per job): exact for the jobs it lists, one for each it
    only counts."""
    for line in report.splitlines():
        found = _TWICE.match(line)
        if found is None:
            continue
        details = re.sub(r" \(\+\d+ more\)$", "", found.group(2)).split("; ")
        extra = sum(max(1, len(d.split(": ", 1)[-1].split(", ")) - 1) for d in details)
        return extra + max(0, int(found.group(1)) - len(details))
    return 0


def read_external(lines: Iterable[str]) -> External:
    """Count `logs/external.jsonl` per job."""
    ext = External()
    for line in lines:
        if not line.strip():
            continue
        rec = json.loads(line)
        source = rec.get("source")
        job = rec.get("job") if source != "charge" else rec.get("job_id")
        if not isinstance(job, int):
            ext.unattributed += 1
            continue
        if source == "smtp":
            ext.copies[job] += 1
        elif source == "charge":
            ext.charges[job] += 1
        elif (source == "stripe" and rec.get("method") == "POST"
              and rec.get("path") == CREATE_PATH and rec.get("status") == 200):
            if rec.get("replayed"):
                ext.replayed_creates[job] += 1
            else:
                ext.new_intents[job] += 1
    return ext


def count_reclaims(attempts: Iterable[tuple[int, int, str | None, bool]]) -> Counter[int]:
    """Reclaims per job from (job id, claim ordinal, outcome, superseded) rows: a claim whose
    job's previous claim lost its lease."""
    by_job: dict[int, list[tuple[int, str | None, bool]]] = defaultdict(list)
    for job, ordinal, outcome, superseded in attempts:
        by_job[job].append((ordinal, outcome, superseded))
    reclaims: Counter[int] = Counter()
    for job, rows in by_job.items():
        rows.sort()
        for (_, outcome, superseded), _later in itertools.pairwise(rows):
            if superseded or outcome in ("lease_lost", "completion_rejected"):
                reclaims[job] += 1
    return reclaims


# Current rows and the copies of the rows the run deleted; the current row wins.
_TABLES_SQL = """
SELECT to_regclass('public.taskboard_fault_deleted') IS NOT NULL,
       to_regclass('public.taskboard_email_sends') IS NOT NULL
"""
_JOBS_SQL = """
SELECT id, kind, completed_at IS NOT NULL, false FROM taskboard_jobs WHERE kind = ANY(%(kinds)s)
"""
_ARCHIVED_JOBS_SQL = """
SELECT (row->>'id')::bigint, row->>'kind', row->>'completed_at' IS NOT NULL, true
  FROM taskboard_fault_deleted WHERE tbl = 'taskboard_jobs' AND row->>'kind' = ANY(%(kinds)s)
"""
_ATTEMPTS_SQL = """
SELECT id, job_id, attempt, outcome, superseded_at IS NOT NULL FROM taskboard_attempts
"""
_ARCHIVED_ATTEMPTS_SQL = """
SELECT (row->>'id')::bigint, (row->>'job_id')::bigint, (row->>'attempt')::int,
       row->>'outcome', row->>'superseded_at' IS NOT NULL
  FROM taskboard_fault_deleted WHERE tbl = 'taskboard_attempts'
"""
_SENDS_SQL = "SELECT DISTINCT job_id FROM taskboard_email_sends"
_ARCHIVED_SENDS_SQL = """
SELECT DISTINCT (row->>'job_id')::bigint FROM taskboard_fault_deleted
 WHERE tbl = 'taskboard_email_sends'
"""
_CHARGES_SQL = "SELECT job_id, payment_intent_id FROM taskboard_billing_charges"
_ARCHIVED_CHARGES_SQL = """
SELECT (row->>'job_id')::bigint, row->>'payment_intent_id'
  FROM taskboard_fault_deleted WHERE tbl = 'taskboard_billing_charges'
"""


async def read_database(url: str) -> Jobs:
    jobs = Jobs()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:

        async def rows(query: str, archived: str | None) -> list[Any]:
            found = await (await conn.execute(query, {"kinds": list(KINDS)})).fetchall()
            if archived is not None:
                found += await (await conn.execute(archived, {"kinds": list(KINDS)})).fetchall()
            return found

        tables = await (await conn.execute(_TABLES_SQL)).fetchone()
        assert tables is not None
        archive, sends = bool(tables[0]), bool(tables[1])
        for job_id, kind, completed, was_archived in await rows(
            _JOBS_SQL, _ARCHIVED_JOBS_SQL if archive else None
        ):
            if was_archived and job_id in jobs.kind:
                continue  # the current row (a later state) was read first
            jobs.kind[job_id] = kind
            if completed:
                jobs.completed.add(job_id)
        attempts: dict[int, tuple[int, int, str | None, bool]] = {}
        for attempt_id, job_id, ordinal, outcome, superseded in await rows(
            _ATTEMPTS_SQL, _ARCHIVED_ATTEMPTS_SQL if archive else None
        ):
            if job_id in jobs.kind:
                attempts.setdefault(attempt_id, (job_id, ordinal, outcome, superseded))
        jobs.reclaims = count_reclaims(attempts.values())
        if sends:
            jobs.mailed = {r[0] for r in await rows(
                _SENDS_SQL, _ARCHIVED_SENDS_SQL if archive else None)}
        for job_id, intent in await rows(_CHARGES_SQL, _ARCHIVED_CHARGES_SQL if archive else None):
            jobs.intents[job_id].add(intent)
    return jobs


def _extra(counts: Counter[int], among: set[int]) -> int:
    """Copies beyond the first, over the jobs `among`."""
    return sum(max(0, n - 1) for job, n in counts.items() if job in among)


def _per(n: int, reclaims: int) -> str:
    return f"{n / reclaims:.2f}" if reclaims else "-"


def tally(
    jobs: Jobs, ext: External | None, summary: dict[str, int], report: str = ""
) -> dict[str, Any]:
    """The figures, per kind; each says where it comes from."""
    out: dict[str, Any] = {"external": "logs/external.jsonl" if ext else "report.txt totals"}
    email, billing = jobs.of("email"), jobs.of("billing")
    email_reclaims = sum(jobs.reclaims[j] for j in email)
    billing_reclaims = sum(jobs.reclaims[j] for j in billing)
    e: dict[str, Any] = {
        "jobs": len(email),
        "reclaims": email_reclaims,
        "jobs_reclaimed": sum(1 for j in email if jobs.reclaims[j]),
    }
    b: dict[str, Any] = {
        "jobs": len(billing),
        "reclaims": billing_reclaims,
        "jobs_reclaimed": sum(1 for j in billing if jobs.reclaims[j]),
    }
    if ext is not None:
        e["messages"] = sum(ext.copies[j] for j in email)
        e["duplicate_sends"] = _extra(ext.copies, email)
        e["jobs_with_duplicates"] = sum(1 for j in email if ext.copies[j] > 1)
        b["intents_created"] = sum(ext.new_intents[j] for j in billing)
        b["duplicate_intents"] = _extra(ext.new_intents, billing)
        b["creates_replayed_by_key"] = sum(ext.replayed_creates[j] for j in billing)
        b["charges"] = sum(ext.charges[j] for j in billing)
        b["duplicate_charges"] = _extra(ext.charges, billing)
        out["unattributed"] = ext.unattributed
    else:
        got_mail = (jobs.completed & email) | (jobs.mailed & email)
        e["messages"] = summary.get("emails")
        e["jobs_with_duplicates"] = summary.get("dup_emails")
        e["duplicate_sends"] = (
            None if "emails" not in summary else max(0, summary["emails"] - len(got_mail))
        )
        e["how"] = ("sink total (report.txt) minus email jobs that got mail "
                    "(completed or with a send record)")
        b["charges"] = summary.get("charges")
        b["duplicate_charges"] = charged_twice(report) if summary else None
        b["intents_created"] = sum(len(jobs.intents[j]) for j in billing)
        b["duplicate_intents"] = sum(max(0, len(jobs.intents[j]) - 1) for j in billing)
        b["how"] = ("charges: the endpoint's total and the checker's 'charged twice' "
                    "violations (report.txt); intents: the workers' charge records, one per "
                    "PaymentIntent Stripe answered (a create whose answer was never recorded "
                    "is not in them)")
    e["duplicate_sends_per_reclaim"] = _per(e["duplicate_sends"] or 0, email_reclaims)
    b["duplicate_intents_per_reclaim"] = _per(b["duplicate_intents"] or 0, billing_reclaims)
    b["duplicate_charges_per_reclaim"] = _per(b["duplicate_charges"] or 0, billing_reclaims)
    out["email"], out["billing"] = e, b
    return out


def render(folder: Path, summary_line: str, figures: dict[str, Any]) -> str:
    lines = [f"soak {folder}", f"  {summary_line}" if summary_line else "  (no report.txt)",
             f"  external side from {figures['external']}"]
    if figures.get("unattributed"):
        lines.append(f"  {figures['unattributed']} message(s)/request(s) named no job")
    for kind in KINDS:
        part = figures[kind]
        shown = "  ".join(f"{k}={v}" for k, v in part.items() if k != "how")
        lines.append(f"{kind}: {shown}")
        if "how" in part:
            lines.append(f"  ({part['how']})")
    return "\n".join(lines)


def _copy(pgdata: Path, copy: Path) -> None:
    copy.parent.chmod(0o755)
    subprocess.run(["cp", "-a", str(pgdata), str(copy)], check=True)
    (copy / "postmaster.pid").unlink(missing_ok=True)


async def _with_database(pgdata: Path) -> Jobs:
    with tempfile.TemporaryDirectory(prefix="soak-duplicates-") as tmp:
        copy = Path(tmp) / "pgdata"
        # The server runs as the data folder's owner (a user of its own when we are root):
        # the copy keeps owners and modes, and its parent lets that user through.
        await asyncio.to_thread(_copy, pgdata, copy)
        server = EmbeddedPostgres(copy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            url = await asyncio.to_thread(server.start)
        try:
            return await read_database(url)
        finally:
            await asyncio.to_thread(server.stop)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="soak_duplicates", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a folder bench/soak.py --keep printed")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--totals-only", action="store_true",
                   help="derive from report.txt's totals even where logs/external.jsonl is "
                        "kept (to count an older soak and a newer one the same way)")
    args = p.parse_args(argv)
    folder: Path = args.folder
    if not (folder / "pgdata" / "PG_VERSION").is_file():
        print(f"soak_duplicates: error: {folder} is not a kept soak folder (no pgdata/ in it)",
              file=sys.stderr)
        return EXIT_USAGE
    report = folder / "report.txt"
    text = report.read_text(encoding="utf-8", errors="replace") if report.is_file() else ""
    summary = parse_summary(text)
    external = folder / EXTERNAL
    ext = None
    if external.is_file() and not args.totals_only:
        with external.open(encoding="utf-8") as f:
            ext = read_external(f)
    try:
        jobs = asyncio.run(_with_database(folder / "pgdata"))
    except Exception as exc:  # the server would not start, or the schema is not Taskboard's
        print(f"soak_duplicates: error: cannot read the soak's database: {exc}",
              file=sys.stderr)
        return EXIT_STATE
    figures = tally(jobs, ext, summary, text)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(render(folder, text.splitlines()[0] if text else "", figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
