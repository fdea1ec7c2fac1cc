"""What `taskboard history` and `taskboard advise` print: one job in full, and lease advice
per kind. The same records the dashboard's job detail and advice screens show."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

from taskboard.core.base.secrets import one_line
from taskboard.core.kinds import KindRegistry
from taskboard.core.queue.results import result as job_result
from taskboard.core.view.board import AttemptRow, JobDetail, KindAdvice
from taskboard.core.view.inspection import job_detail, lease_advice
from taskboard.core.view.lease_judgement import DEFAULT_RECOVERY_SECONDS, RULE, Judgement, judge
from taskboard.core.view.step_rows import shown_result, step_line

EXIT_OK = 0
async def history(conn: Any, job_id: int, as_json: bool) -> int:
    detail = await job_detail(conn, job_id)
    if as_json:
        data = dataclasses.asdict(detail) | {"effects": detail.effects_on_record}
        print(json.dumps(_plain(data), indent=2))
        return EXIT_OK
    for line in history_lines(detail):
        print(line)
    return EXIT_OK


async def result(conn: Any, job_id: int, wait: float, as_json: bool) -> int:
    """`taskboard result`: the result as JSON on one line; `NoResult` (exit 3) says why
    there is none."""
    value = await job_result(conn, job_id, timeout=wait)
    if as_json:
        print(json.dumps({"id": job_id, "state": "completed", "result": value}))
    else:
        print(json.dumps(value, ensure_ascii=True))
    return EXIT_OK


def history_lines(d: JobDetail) -> list[str]:
    """The job, its payload (secrets masked), every claim with its full error, the
    effects on record (charges, sends) with the job's fate, its steps and its result."""
    lines = [
        f"job #{d.id}  {one_line(d.kind)}  queue {one_line(d.queue)}  {d.state}  "
        f"attempts {d.attempts_used}/{d.max_attempts}"
        + (f" ({len(d.attempts)} claims)" if len(d.attempts) != d.attempts_used else ""),
        f"created {_at(d.created_at)}  run at {_at(d.run_at)}"
        + (f"  finished {_at(d.finished_at)}" if d.finished_at else ""),
    ]
    if d.holder:
        lines.append(f"held by {one_line(d.holder)}, lease until {_at(d.lease_expires_at)}")
    if d.unique_key is not None:
        lines.append(f"unique key {one_line(d.unique_key)}")
    if d.trace_id is not None:
        lines.append(f"trace {d.trace_id}")
    if d.timeout_seconds is not None:
        lines.append(f"timeout {d.timeout_seconds:g} s")
    if d.last_error:
        lines.append(f"last error: {one_line(d.last_error)}")
    lines.append("payload: " + json.dumps(d.payload, sort_keys=True, ensure_ascii=True))
    lines.append(f"claims ({len(d.attempts)}):")
    lines += [line for a in d.attempts for line in _claim_lines(a)]
    effects = d.effects_on_record
    lines.append(f"effects ({len(effects)}):")
    lines += [f"  {one_line(line)}" for line in effects]
    if d.after:
        lines.append("after: " + ", ".join(one_line(a) for a in d.after))
    if d.steps:
        lines.append(f"steps ({len(d.steps)}):")
        lines += [f"  {one_line(step_line(s))}" for s in d.steps]
    if d.result is not None:
        lines.append(f"result: {one_line(shown_result(d.result))}")
    if d.actions:
        lines.append(f"operator actions ({len(d.actions)}):")
        lines += [f"  {_at(x.at)}  {x.action}  {one_line(x.detail)}" for x in d.actions]
    return lines


def _claim_lines(a: AttemptRow) -> list[str]:
    ended = f"  ended {_at(a.ended_at)}" if a.ended_at else ""
    lost = f"  lease taken over {_at(a.superseded_at)}" if a.superseded_at else ""
    out = [
        f"  #{a.ordinal}  {one_line(a.worker)}  token {a.token[:8]}  claimed {_at(a.claimed_at)}"
        f"{ended}  {a.outcome or 'running'}{lost}"
    ]
    timings = [
        f"{name} {value:.3f} s"
        for name, value in (
            ("pickup", a.pickup_seconds),
            ("handler", a.handler_seconds),
            ("least margin", a.min_margin_seconds),
        )
        if value is not None
    ]
    if timings:
        out.append("      " + "  ".join(timings))
    if a.error:
        out.append(f"      error: {one_line(a.error)}")
    return out


async def advise(
    conn: Any, as_json: bool, registry: KindRegistry,
    recovery: float = DEFAULT_RECOVERY_SECONDS,
) -> int:
    rows = await lease_advice(conn)
    judged = [(r, judge(r, registry.find(r.kind), recovery=recovery)) for r in rows]
    if as_json:
        print(json.dumps([{**dataclasses.asdict(r), **dataclasses.asdict(j)}
                          for r, j in judged], indent=2))
        return EXIT_OK
    for line in advice_lines(judged):
        print(line)
    # The kinds this installation runs (with --app, the app's) that no advice covers yet:
    # a new kind's lease is a guess until it has run.
    seen = {r.kind for r in rows}
    unseen = [name for name in registry.runnable() if name not in seen]
    if rows and unseen:
        print(f"no timings yet for: {', '.join(unseen)}")
    return EXIT_OK


def advice_lines(judged: list[tuple[KindAdvice, Judgement]]) -> list[str]:
    """One row per kind, the verdict last, what sets its lease below it, and the rule."""
    if not judged:
        return ["no attempts with recorded timings yet: run some jobs first"]
    out = [
        f"{'kind':<16} {'samples':>7} {'p50':>8} {'p99':>8} {'margin':>8} {'stall':>7} "
        f"{'lease':>7}  verdict"
    ]
    for r, j in judged:
        margin = f"{r.least_margin:.2f}" if r.least_margin is not None else "-"
        stall = f"{j.stall:.2f}" if j.stall is not None else "-"
        verdict = j.verdict
        if j.suggested_lease is not None:
            verdict += f": lease_seconds {j.suggested_lease:g}"
        out.append(
            f"{one_line(r.kind)[:16]:<16} {r.samples:>7} {r.p50:>8.2f} {r.p99:>8.2f} "
            f"{margin:>8} {stall:>7} {j.lease:>7g}  {verdict} ({j.reason})"
        )
        out.append(f"  set by: {j.set_by}")
    out.append(RULE)
    return out


def _at(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S.%f}"[:-3] + f" {value:%Z}"


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value
