"""Jobs no live worker can run, said in words: a queue nobody works, a kind nobody runs.

Such jobs wait, untouched, until a worker that knows them starts (see "Producers without
handlers" in the README); `status` and the dashboard say so instead of leaving the
operator to wonder why the pending count never moves.
"""

from __future__ import annotations

from collections.abc import Sequence

from taskboard.core.view.board import OrphanKind


def no_worker_lines(orphans: Sequence[OrphanKind]) -> list[str]:
    """One line per queue no live worker works, and per kind nobody runs in a worked one."""
    lines = []
    unworked: dict[str, list[OrphanKind]] = {}
    for o in orphans:
        if not o.queue_worked:
            unworked.setdefault(o.queue, []).append(o)
    for queue, kinds in unworked.items():
        waiting = sum(o.waiting for o in kinds)
        names = ", ".join(o.kind for o in kinds)
        lines.append(
            f"no live worker works queue {queue!r}: {_jobs(waiting)} wait ({names})"
        )
    lines += [
        f"no live worker runs kind {o.kind!r} in queue {o.queue!r}: {_jobs(o.waiting)} wait"
        for o in orphans
        if o.queue_worked
    ]
    return lines


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"

