"""`--app MODULE:ATTR` (or `TASKBOARD_APP`): the application's own kinds for `taskboard
worker`, `enqueue`, `schedule add`, `advise` and `taskboard-tui`.

ATTR names a `KindRegistry`, or a callable returning one, importable from the current
directory or `PYTHONPATH`. The built-in kinds stay available beside the app's (an app kind
of the same name wins) unless the app's registry was made with `KindRegistry(builtins=False)`.
Whatever goes wrong is a `ConfigError`: one line, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping

from taskboard.core.base.errors import ConfigError
from taskboard.core.kinds import KindRegistry, builtin_registry

APP_ENV = "TASKBOARD_APP"
APP_HELP = (
    "MODULE:ATTR naming your KindRegistry (or a callable returning one), importable from "
    f"the current directory or PYTHONPATH; default ${APP_ENV}, else the built-in kinds only"
)


def add_app_argument(parser: argparse.ArgumentParser) -> None:
    """The `--app` flag, as every command that needs the kinds has it."""
    parser.add_argument("--app", default=None, metavar="MODULE:ATTR", help=APP_HELP)


def app_spec(flag: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The app named by the flag, else by `TASKBOARD_APP`; None for neither."""
    spec = flag if flag is not None else environ.get(APP_ENV)
    return spec if spec is None or spec.strip() else None


def load_registry(spec: str | None) -> KindRegistry:
    """The kinds of the app `spec` names, with the built-ins; the built-ins alone for None."""
    if spec is None:
        return builtin_registry()
    app = _load_app(spec)
    if not app.builtins:
        return app
    merged = KindRegistry()
    builtins = builtin_registry()
    for name in builtins.names():
        if app.find(name) is None:
            merged.register(builtins.get(name))
    for name in app.names():
        merged.register(app.get(name))
    return merged


def _load_app(spec: str) -> KindRegistry:
    module_name, sep, attr = spec.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app must be MODULE:ATTR (e.g. myapp.jobs:registry), got {spec!r}")
    # Console scripts do not put the current directory on the path; `python -m` does.
    # Users expect `--app myapp:registry` to find ./myapp.py, as celery -A does.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigError(
                f"--app {spec}: no module named {module_name!r} in the current directory "
                "or on PYTHONPATH"
            ) from None
        raise ConfigError(f"--app {spec}: module {module_name!r} failed to import: {exc}") from None
    except Exception as exc:  # the app's own import-time error, whatever it is
        raise ConfigError(
            f"--app {spec}: module {module_name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from None
    value: object = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigError(f"--app {spec}: {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(value, KindRegistry) and callable(value):
        try:
            value = value()
        except Exception as exc:
            raise ConfigError(
                f"--app {spec}: calling {attr} failed: {type(exc).__name__}: {exc}"
            ) from None
    if not isinstance(value, KindRegistry):
        raise ConfigError(
            f"--app {spec}: {attr} is a {type(value).__name__}, not a KindRegistry "
            "(or a callable returning one)"
        )
    return value
