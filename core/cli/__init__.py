"""`taskboard`: the headless command line."""

from taskboard.core.cli.main import main, run
from taskboard.core.cli.parser import build_parser

__all__ = ["build_parser", "main", "run"]
