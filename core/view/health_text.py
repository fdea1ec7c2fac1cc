"""`taskboard health` in words: the grade and what to do first, then every reading."""

from __future__ import annotations

from taskboard.core.view.health import HealthReport, clock, span


def report_lines(r: HealthReport) -> list[str]:
    """`taskboard health`'s text: the grade and advice first, then the readings."""
    lines = [f"health {r.level.upper()}: {r.advice}"]
    lines += [f"  {lv:<5}  {text}" for lv, text in r.findings]
    lines.append("tables (dead / live row versions, last vacuum):")
    for t in r.tables:
        lines.append(
            f"  {t.relname:<28} {t.n_dead_tup:>9} / {t.n_live_tup:<9} "
            f"{t.dead_share:>4.0%} dead  vacuumed {clock(t.vacuumed)}"
        )
    h = r.holder
    if h is None:
        lines.append("oldest snapshot: no other session holds one")
    else:
        lines.append(
            f"oldest snapshot: pid {h.pid}  {h.application}  role {h.role or '?'}  "
            f"database {h.database or '?'}  {h.state or '?'}  transaction since "
            f"{clock(h.xact_start)} ({span(h.open_seconds or 0)})  query since "
            f"{clock(h.query_start)}  {h.xid_age} transactions old"
        )
    if not r.sees_all_sessions:
        lines.append("  (other roles' sessions are hidden from this role: pg_read_all_stats)")
    if r.prepared is not None:
        lines.append(
            f"prepared transaction {r.prepared.gid!r} since {clock(r.prepared.prepared)}"
        )
    if r.slots:
        lines += [
            f"replication slot {s.slot_name} ({s.slot_type}, "
            f"{'active' if s.active else 'inactive'}) holds {s.xid_age} transactions"
            for s in r.slots
        ]
    else:
        lines.append("replication slots: none holds the horizon")
    if r.claim_mean_ms is not None:
        lines.append(f"{r.claim_note}: {r.claim_mean_ms:.2f} ms")
    else:
        lines.append(r.claim_note)
    return lines
