"""The walls between the rooms, checked: import-linter's contracts (in pyproject.toml), the
size of core's modules (a role a newcomer can read in one sitting), no import circle in the
engine, and applications held to the public API."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.readme_blocks import README, blocks

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


def _imported_modules(code: str) -> set[str]:
    """Every module `code` imports, wherever the import is: under `if TYPE_CHECKING:` (which
    import-linter is told to skip) and inside functions too. `from a import b` counts as
    `a.b` as well, since b may be a module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_engine_imports_without_a_circle_even_for_types() -> None:
    # A circle hidden behind `if TYPE_CHECKING:` still ties the modules together: neither
    # can be read, moved or tested without the other (worker -> crew -> worker was one;
    # engine/worker_parts.py names what the roles use of the worker instead).
    engine = ROOT / "core" / "engine"
    names = {
        "taskboard.core.engine."
        + ".".join(p.relative_to(engine).with_suffix("").parts).removesuffix(".__init__"): p
        for p in engine.rglob("*.py")
    }
    edges = {}
    for name, path in names.items():
        imported = _imported_modules(path.read_text(encoding="utf-8"))
        edges[name] = sorted(m for m in imported if m in names and m != name)
    done: set[str] = set()

    def circle_from(name: str, trail: list[str]) -> list[str] | None:
        if name in trail:
            return [*trail[trail.index(name):], name]
        if name in done:
            return None
        for nxt in edges[name]:
            if found := circle_from(nxt, [*trail, name]):
                return found
        done.add(name)
        return None

    for name in sorted(names):
        circle = circle_from(name, [])
        assert circle is None, "import circle in the engine: " + " -> ".join(circle)


def _application_code() -> dict[str, str]:
    """What users' applications look like: the apps the `--app` tests load, and every
    Python example in the README."""
    code = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
            for p in sorted((ROOT / "tests" / "apps").glob("*.py"))}
    for number, (_, example) in enumerate(blocks(README, "python"), 1):
        code[f"README.md, Python example {number}"] = example
    return code


def test_applications_use_the_public_api_only() -> None:
    # Everything under taskboard.core but the package itself is internal and may move (the
    # regroup did move it); an example or test app that reached in would teach users a
    # path that breaks. import-linter holds tests/apps to this as well.
    code = _application_code()
    assert len(code) > 4, code.keys()
    reached_in = {}
    for where, text in code.items():
        internal = sorted(m for m in _imported_modules(text) if m.startswith("taskboard")
                          and m != "taskboard.core" and not _is_public_name(m))
        if internal:
            reached_in[where] = internal
    assert not reached_in, f"internal modules imported (use taskboard.core): {reached_in}"


def _is_public_name(dotted: str) -> bool:
    import taskboard.core

    parent, _, name = dotted.rpartition(".")
    return parent == "taskboard.core" and name in taskboard.core.__all__


def test_every_public_name_is_found_where_the_api_says() -> None:
    # The public API loads its names on first use from internal modules, which move: a
    # stale path would fail only when a user first touched that name.
    import taskboard.core

    assert sorted(taskboard.core._WHERE) == sorted(taskboard.core.__all__)
    for name in taskboard.core.__all__:
        assert getattr(taskboard.core, name) is not None, name
