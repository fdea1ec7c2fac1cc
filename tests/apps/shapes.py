"""An application with one async and one plain `def` kind, each writing a line per run to
the file named by `SHAPES_LOG` (so a test in another process can count the runs)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from taskboard.core import JobContext, KindRegistry, SyncJobContext

registry = KindRegistry()


@dataclass
class Square:
    side: int
    label: str = "square"


@dataclass
class Cube:
    side: int


def _log(line: str) -> None:
    path = os.environ.get("SHAPES_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


@registry.kind("square")
async def square(ctx: JobContext, job: Square) -> None:
    await ctx.checkpoint()
    _log(f"square {ctx.job_id} {job.label} {job.side * job.side}")


@registry.kind("cube")
def cube(ctx: SyncJobContext, job: Cube) -> None:
    ctx.checkpoint()
    with ctx.external("cube log"):
        _log(f"cube {ctx.job_id} {job.side**3}")


def make_registry() -> KindRegistry:
    """The callable form of `--app`."""
    return registry


only_mine = KindRegistry(builtins=False)
only_mine.kind("square")(square)  # the same handler, without the built-in kinds beside it

not_a_registry = 42
