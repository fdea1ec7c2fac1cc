"""Recovery: a worker holding a job is SIGKILLed; how long until another worker starts it again.

Per run: a fresh database, two worker processes of the same settings, one long job. When its
handler has been running for about one second, the worker running it is SIGKILLed (no
release, no goodbye). The clock runs from the kill to the moment the surviving worker's
handler reports the same job starting again. For Taskboard the lease deadline is read from
the database just after the kill, so the table also shows how soon after the deadline the
job came back (the target: within 0.5 s, p50 under 100 ms).

Each system runs with its default settings and with its fastest documented settings. A
system that never re-runs the job by itself is waited for up to a cap and reported as such.
Measured at each added round trip between the workers and PostgreSQL (the harness's kill,
enqueue and lease reads do not go through the proxy).

    uv run --group bench python bench/recovery.py --runs 3 [--rtt 0,0.5,2]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

from common import (
    BenchServer,
    Link,
    Section,
    StartBoard,
    Target,
    WorkerProcess,
    base_parser,
    link,
    log,
    main_for,
    median,
    rtts,
    running_workers,
    selected,
    spread,
)
from systems import AT_DEFAULTS, TaskboardClient, fresh_system, runner_argv

KILL_AFTER = 1.0  # seconds into the job
HOLD_SECONDS = 3600.0
CAP = 120.0  # longest wait for a re-run (PgQueuer's default worst case is ~60 s)
NEVER_CAP = 90.0  # procrastinate by default: enough to show it is not a slow timer
QUICK_CAP = 8.0


@dataclass(frozen=True)
class Preset:
    """One system at one group of settings."""

    system: str
    settings: str
    args: tuple[str, ...]
    cap: float = CAP
    lease: float | None = None  # Taskboard: the lease, for the target


def presets(systems: list[str]) -> list[Preset]:
    """Defaults and fastest documented settings for each selected system."""
    out = []
    if "taskboard" in systems:
        out += [
            Preset("taskboard", "default: lease 60 s (renew every 20 s)", ("--lease", "60"), lease=60),
            Preset("taskboard", "lease 2 s (renew every 0.67 s)", ("--lease", "2"), lease=2),
        ]
    if "procrastinate" in systems:
        out += [
            Preset("procrastinate", "default (no stalled-job rescue)", (), cap=NEVER_CAP),
            Preset("procrastinate",
                   "docs' retry_stalled_jobs periodic task every 1 s, seconds_since_heartbeat=2, "
                   "update_heartbeat_interval=1, stalled_worker_timeout=2, "
                   "fetch_job_polling_interval=1",
                   ("--retry-stalled", "--stalled-after", "2", "--heartbeat", "1",
                    "--stalled-timeout", "2", "--poll", "1")),
        ]
    if "pgqueuer" in systems:
        out += [
            Preset("pgqueuer", "default: heartbeat_timeout 30 s, dequeue_timeout 30 s", ()),
            Preset("pgqueuer", "heartbeat_timeout 2 s (beats every 1 s), dequeue_timeout 1 s",
                   ("--heartbeat-timeout", "2", "--dequeue-timeout", "1")),
        ]
    return out


@dataclass
class Outcome:
    """One kill and what followed."""

    recovered: float | None  # seconds from SIGKILL to the re-run starting; None: not within cap
    after_deadline: float | None = None  # Taskboard: seconds from lease deadline to re-run


async def one_run(server: BenchServer, preset: Preset, run: int, cap: float, net: Link) -> Outcome:
    """Kill the worker running the job; time the re-run by the survivor."""
    flavor = AT_DEFAULTS[preset.system]
    async with fresh_system(server, flavor, "rec") as (dbname, _, client):
        board = StartBoard()
        procs = [WorkerProcess(f"{preset.system}-rec-w{i}",
                               runner_argv(flavor, net.url(dbname), f"w{i}", *preset.args),
                               board) for i in range(2)]
        async with running_workers(procs):
            key = f"r{run}"
            await client.enqueue_hold(key, HOLD_SECONDS)
            [(started, pid)] = await board.wait(key, timeout=60)
            victim = next(p for p in procs if p.pid == pid)
            await asyncio.sleep(max(0.0, started + KILL_AFTER - time.monotonic()))
            killed_at = time.monotonic()
            victim.kill()
            deadline = None
            if isinstance(client, TaskboardClient):
                # Read after the kill: a renewal sent just before it could still land.
                await asyncio.sleep(0.05)
                sent = time.monotonic()
                left = await client.lease_left(key)
                if left is not None:
                    deadline = (sent + time.monotonic()) / 2 + left
            try:
                starts = await board.wait(key, count=2, timeout=cap)
            except TimeoutError:
                return Outcome(None)
            again = starts[1][0]
            return Outcome(again - killed_at, None if deadline is None else again - deadline)


async def measure(server: BenchServer, args: argparse.Namespace) -> Section:
    """Every preset, `runs` kills each (one for a system that never recovers)."""
    runs = 1 if args.quick else args.runs
    section = Section(
        "Recovery after SIGKILL ~1 s into a job (two workers; time until the survivor starts it again)",
        ["system", "settings", "added RTT", "kill -> re-run, s", "lease deadline -> re-run, ms",
         "runs"])
    for rtt in rtts(args):
        async with link(server, rtt) as net:
            for preset in presets(selected(args)):
                await _preset_row(server, preset, net, runs, args.quick, section)
    section.notes += [
        "Every system runs on its own defaults (procrastinate: concurrency 1; PgQueuer: batch 10, "
        "no concurrency cap) plus the settings named in the row.",
        "procrastinate has no automatic rescue: its docs ask users to write a periodic task that "
        "calls get_stalled_jobs()/retry_job(); without it a SIGKILLed worker's job stays 'doing' "
        "for ever. retry_job sends no NOTIFY, so the rescued job waits for the next fetch poll.",
        "PgQueuer re-picks a 'picked' job whose heartbeat is older than heartbeat_timeout, but only "
        "when a worker next dequeues (on a NOTIFY or after dequeue_timeout).",
        "Taskboard reclaims when the lease expires: an idle worker sleeps until the earliest lease "
        "deadline it can see (capped by its 5 s fallback poll).",
    ]
    return section


async def _preset_row(server: BenchServer, preset: Preset, net: Link, runs: int, quick: bool,
                      section: Section) -> None:
    cap = QUICK_CAP if quick else preset.cap
    label = AT_DEFAULTS[preset.system].label
    outcomes = []
    for run in range(runs):
        log(f"recovery: {label} [{preset.settings}], {net.label}, run {run + 1}/{runs} "
            f"(waits up to {cap:g}s)")
        outcome = await one_run(server, preset, run, cap, net)
        log("  " + (f"re-run {outcome.recovered:.2f}s after the kill" if outcome.recovered is not None
                    else f"not re-run within {cap:g}s"))
        outcomes.append(outcome)
        if outcome.recovered is None and preset.cap == NEVER_CAP:
            break  # one run is enough to show it does not come back by itself
    done = [o.recovered for o in outcomes if o.recovered is not None]
    missing = len(outcomes) - len(done)
    shown = spread(done, "{:.2f}") if done else f"never (not within {cap:g} s)"
    if done and missing:
        shown += f"; {missing} run(s) not within {cap:g} s"
    after = [1000 * o.after_deadline for o in outcomes if o.after_deadline is not None]
    section.rows.append([label, preset.settings, net.label, shown,
                         spread(after, "{:.0f}") if after else "—", str(len(outcomes))])
    if preset.lease is not None:
        if cap <= preset.lease:
            section.targets.append(Target(
                f"Taskboard recovery, lease {preset.lease:g} s, {net.label}",
                "within 0.5 s of the deadline",
                f"not judged: --quick caps the wait at {cap:g} s, before the deadline", None))
        else:
            section.targets.append(_target(preset, after, missing, net.label))


def _target(preset: Preset, after_ms: list[float], missing: int, rtt: str) -> Target:
    name = f"Taskboard recovery, lease {preset.lease:g} s, {rtt} added RTT"
    goal = "re-run within 0.5 s after the lease deadline, p50 < 100 ms"
    if not after_ms or missing:
        return Target(name, goal, "not re-run in some runs" if missing else "no data", False)
    worst, p50 = max(after_ms), median(after_ms)
    return Target(name, goal, f"p50 {p50:.0f} ms, max {worst:.0f} ms after the deadline",
                  worst < 500 and p50 < 100)


if __name__ == "__main__":
    main_for(measure, base_parser(__doc__.splitlines()[0], rtt=True))
