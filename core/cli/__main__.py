"""`python -m taskboard.core.cli`: the same as the `taskboard` command."""

from taskboard.core.cli.main import run

run()
