"""Every SQL statement is static text; user data travels only as bind parameters.

An AST check of `core/`: the first argument of every `.execute(...)` call must be SQL fixed
at import time — a string literal, a module constant holding one (e.g. `sql.CLAIM` from
`taskboard.core.sql`, whose package re-exports its modules' constants), a sum of such
constants, an item of a constant tuple of them, the schema's migrations (`.sql` files in the
package, read at import), or a `psycopg.sql` composition
(whose `Identifier`/`Literal` do the quoting). An f-string, `%`, `.format()` on a plain
string, or any variable computed at run time fails the test, naming the file and line.
Ruff's S608 (SQL built from strings) is configured too and must stay clean.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"taskboard.core": ROOT / "core", "taskboard.tui": ROOT / "tui"}
EXECUTE_METHODS = {"execute", "executemany"}
SQL_FILE_LOADERS = {"_load_migrations"}


@dataclass
class Module:
    """One parsed module: its constants and what its imported names refer to."""

    path: Path
    tree: ast.Module
    constants: dict[str, ast.expr] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # local name -> module
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (module, name)


_cache: dict[Path, Module] = {}


def module_file(name: str) -> Path | None:
    for package, folder in PACKAGES.items():
        if name == package:
            return folder / "__init__.py"
        if name.startswith(package + "."):
            rel = name[len(package) + 1:].replace(".", "/")
            for candidate in (folder / f"{rel}.py", folder / rel / "__init__.py"):
                if candidate.exists():
                    return candidate
    return None


def load(path: Path) -> Module:
    if path not in _cache:
        tree = ast.parse(path.read_text(), filename=str(path))
        mod = Module(path, tree)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    mod.constants[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    mod.constants[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if alias.name == "*":  # sql/__init__.py gathers its modules' statements
                        source = module_file(node.module)
                        for name in load(source).constants if source else ():
                            mod.imported[name] = (node.module, name)
                        continue
                    local = alias.asname or alias.name
                    full = f"{node.module}.{alias.name}"
                    if module_file(full) is not None or full == "psycopg.sql":
                        mod.modules[local] = full
                    else:
                        mod.imported[local] = (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    mod.modules[alias.asname or alias.name.split(".")[0]] = alias.name
        _cache[path] = mod
    return _cache[path]


def is_static(node: ast.expr, mod: Module, depth: int = 0) -> bool:
    """True when `node` is SQL text fixed at import time (or a psycopg.sql composition);
    `depth` counts the names followed to get there."""
    if depth > 20:
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str | bytes)
    if isinstance(node, ast.Name):
        if node.id in mod.constants:
            return is_static(mod.constants[node.id], mod, depth + 1)
        if node.id in mod.imported:
            source, name = mod.imported[node.id]
            path = module_file(source)
            return path is not None and is_static(ast.Name(name), load(path), depth + 1)
        return False
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        target = mod.modules.get(node.value.id)
        path = module_file(target) if target else None
        if path is not None:
            return is_static(ast.Name(node.attr), load(path), depth + 1)
        return False
    if isinstance(node, ast.Tuple | ast.List):
        return all(is_static(item, mod, depth + 1) for item in node.elts)
    if isinstance(node, ast.Dict):  # statements chosen by a key: every value must be fixed
        return all(is_static(value, mod, depth + 1) for value in node.values)
    if isinstance(node, ast.Subscript):  # an item of a constant tuple or dict of statements
        return is_static(node.value, mod, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        # An AST is finite: only a name's resolution (which could loop) counts against depth,
        # so a statement joined from many constants is not mistaken for a dynamic one.
        return is_static(node.left, mod, depth) and is_static(node.right, mod, depth)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in SQL_FILE_LOADERS
        and mod.path == ROOT / "core" / "engine" / "schema.py"
    ):
        return True  # the migrations: .sql files shipped in the package, read at import
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "encode" and not node.args:
            return is_static(node.func.value, mod, depth + 1)
        if node.func.attr == "format":  # only psycopg.sql.SQL(...).format(...)
            return _is_sql_composition(node.func.value, mod)
        if node.func.attr == "SQL":
            return _is_sql_composition(node, mod)
    return False


def _is_sql_composition(node: ast.expr, mod: Module) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "SQL"
        and isinstance(node.func.value, ast.Name)
        and mod.modules.get(node.func.value.id) == "psycopg.sql"
        and len(node.args) == 1
        and is_static(node.args[0], mod)
    )


def execute_calls(mod: Module) -> list[ast.Call]:
    return [
        node for node in ast.walk(mod.tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in EXECUTE_METHODS
    ]


def _where(mod: Module, node: ast.AST) -> str:
    return f"{mod.path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def test_every_statement_in_core_is_static_sql() -> None:
    checked, dynamic = 0, []
    for path in sorted((ROOT / "core").rglob("*.py")):
        mod = load(path)
        for call in execute_calls(mod):
            checked += 1
            first = call.args[0] if call.args else None
            if first is None or not is_static(first, mod):
                dynamic.append(f"{_where(mod, call)}: {ast.unparse(call)[:120]}")
    assert not dynamic, "SQL not fixed at import time:\n" + "\n".join(dynamic)
    assert checked >= 30  # the scan really saw the engine's statements


def test_the_check_catches_sql_built_from_data() -> None:
    source = '''
from taskboard.core import sql
TABLE = "taskboard_jobs"
BY_STATE = {"pending": sql.LIST_PENDING, "dead": "SELECT 1"}
MIXED = {"pending": sql.LIST_PENDING, "dead": "SELECT " + TABLE2}
async def f(conn, name, job_id):
    await conn.execute(f"SELECT * FROM jobs WHERE kind = '{name}'")
    await conn.execute("SELECT * FROM jobs WHERE id = %s" % job_id)
    await conn.execute("SELECT {}".format(name))
    await conn.execute("SELECT 1 FROM " + name)
    await conn.execute(name)
    await conn.execute(sql.CLAIM, {"limit": 1})
    await conn.execute("SELECT 1 FROM " + TABLE)
    await conn.execute(BY_STATE[name])
    await conn.execute(MIXED[name])
'''
    mod = Module(Path("example.py"), ast.parse(source))
    load_like(mod)
    verdicts = [is_static(call.args[0], mod) for call in execute_calls(mod)]
    assert verdicts == [False, False, False, False, False, True, True, True, False]


def load_like(mod: Module) -> None:
    """Fill `mod`'s constants and imports the way `load` does (for inline sources)."""
    for node in mod.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            mod.constants[node.targets[0].id] = node.value
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                mod.modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"


def test_the_dashboard_owns_no_sql() -> None:
    calls = [
        _where(mod, call)
        for path in sorted((ROOT / "tui").rglob("*.py"))
        for mod in [load(path)]
        for call in execute_calls(mod)
    ]
    assert not calls, f"tui/ runs SQL itself: {calls}"


def test_ruff_s608_is_configured_and_clean_on_core() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lint = config["tool"]["ruff"]["lint"]
    assert "S608" in lint["select"] or "S" in lint["select"]
    # An exemption inside core/ or tui/ must name one file, and that file may only build
    # statements out of its own static text (sql.py joins shared CTEs, for instance).
    for pattern, ignored in lint.get("per-file-ignores", {}).items():
        if not ({"S608", "S"} & set(ignored)) or not pattern.startswith(("core", "tui", "*")):
            continue
        path = ROOT / pattern
        assert not any(ch in pattern for ch in "*?[") and path.is_file(), (
            f"S608 is switched off for {pattern!r}: too wide"
        )
        mod = load(path)
        dynamic = [name for name, value in mod.constants.items()
                   if isinstance(value, ast.Constant | ast.BinOp | ast.JoinedStr | ast.Call)
                   and not is_static(value, mod)]
        assert not dynamic, f"{pattern} builds statements at run time: {dynamic}"
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "S608",
         str(ROOT / "core"), str(ROOT / "tui")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
