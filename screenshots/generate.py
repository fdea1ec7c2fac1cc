"""Regenerate screenshots/*.svg from the fixed board: `uv run python screenshots/generate.py`.

The scenes are the ones the snapshot tests pin (`tests/tui/sample_scenes.py`, and
`tests/tui/fakes_screens.py` for the job, jobs, advice, confirm and trends screens; test
fixtures, not part of the installed package), rendered
headless at a fixed size with a frozen clock, so running this twice changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # the scenes live with the tests
    sys.path.insert(0, str(HERE.parent))

from tests.tui.fakes_screens import ScreenScene, screen_scenes  # noqa: E402
from tests.tui.sample_scenes import Scene, all_scenes  # noqa: E402


async def capture(scene: Scene | ScreenScene) -> str:
    """Run one scene headless and return its SVG."""
    async with scene.app.run_test(size=scene.size) as pilot:
        await scene.prepare(pilot)
        return scene.app.export_screenshot(title=f"Taskboard - {scene.name}")


async def render(only: set[str] | None = None) -> dict[str, str]:
    """SVG of every scene (or of those named in `only`), by scene name."""
    return {
        scene.name: await capture(scene)
        for scene in [*all_scenes(), *screen_scenes()]
        if only is None or scene.name in only
    }


def main() -> None:
    """Command line: optional scene names, optional output folder."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenes", nargs="*", help="scene names (default: all)")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder")
    args = parser.parse_args()
    svgs = asyncio.run(render(set(args.scenes) or None))
    unknown = set(args.scenes) - set(svgs)
    if unknown:
        parser.error(f"unknown scenes: {', '.join(sorted(unknown))}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, svg in svgs.items():
        path = args.out / f"{name}.svg"
        # LF only: the files are compared byte for byte and must not depend on the OS.
        path.write_text(svg, encoding="utf-8", newline="\n")
        print(path)


if __name__ == "__main__":
    main()
