"""`taskboard`: the headless command line."""

from taskboard.core.cli.main import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
