"""The walls between the rooms, checked: import-linter's contracts (in pyproject.toml) and
the size of core's modules (a role a newcomer can read in one sitting)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LARGEST_MODULE_LINES = 320


def test_import_contracts_are_kept() -> None:
    # The installed names (taskboard.core, taskboard.tui) through .typecheck's symlinks,
    # as mypy reads them.
    env = {**os.environ, "PYTHONPATH": str(ROOT / ".typecheck")}
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run(
        [str(lint)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_module_in_core_is_a_wall_of_code() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in (ROOT / "core").rglob("*.py")
    }
    big = {path: lines for path, lines in sizes.items() if lines > LARGEST_MODULE_LINES}
    assert not big, f"modules over {LARGEST_MODULE_LINES} lines: {big}"
