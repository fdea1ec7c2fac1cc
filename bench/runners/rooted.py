"""Run a bench runner against another checkout of Taskboard: `rooted.py ROOT SCRIPT ARGS...`.

The bench's interpreter has this checkout installed in editable mode, through a finder
that setuptools appends to `sys.meta_path`; a folder put first on `sys.path` is searched
before it. `ROOT/.typecheck/taskboard` links `core` and `tui` under their installed names
(every checkout has it, for mypy), so with it first, `import taskboard.core` loads ROOT's
code: the same runner script, the same interpreter and dependencies, another engine.
`bench/systems.py` starts a flavor with a `root` through this script
(`--taskboard-root PATH`), so one run can put two checkouts side by side.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def use_root(root: str) -> None:
    """Make `import taskboard.core` load `root`'s code; exit 2 if it is not a checkout."""
    typecheck = Path(root).resolve() / ".typecheck"
    if not (typecheck / "taskboard" / "core").is_dir():
        sys.stderr.write(f"{root}: not a Taskboard checkout (no .typecheck/taskboard/core)\n")
        raise SystemExit(2)
    if "taskboard" in sys.modules:
        raise RuntimeError("taskboard was imported before its root was chosen")
    sys.path.insert(0, str(typecheck))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.stderr.write("usage: rooted.py ROOT SCRIPT [ARGS...]\n")
        raise SystemExit(2)
    use_root(sys.argv[1])
    script = sys.argv[2]
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")
