"""The README's fenced code blocks, for the tests that run them as written."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def blocks(text: str, language: str) -> list[tuple[int, str]]:
    """(offset, code) of every fenced block of `language` in `text`."""
    return [(m.start(), m.group(2)) for m in FENCE.finditer(text) if m.group(1) == language]


def example(marker: str) -> str:
    """The one Python block of the README that contains `marker`."""
    found = [code for _, code in blocks(README, "python") if marker in code]
    assert len(found) == 1, f"{len(found)} Python examples in README.md contain {marker!r}"
    return found[0]
