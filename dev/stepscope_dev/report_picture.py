"""The README's picture of the report: the first screen of the straggler scenario's report.

`make docs-examples` runs this. It analyses tests/data/scenarios/straggler as `stepscope
analyze` does, so the picture is of the report the current code writes, and has Debian's
headless Chromium (``make browser`` installs it) draw the page at 1280x800 into
docs/images/report.png: what a reader sees before scrolling, the verdict included.
tests/unit/analysis_merge/test_report_in_browser.py checks that page in the same browser.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from stepscope.cli.analyze import analyze
from stepscope.storage import SessionArtifact

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIO = REPO_ROOT / "tests" / "data" / "scenarios" / "straggler"
PICTURE = REPO_ROOT / "docs" / "images" / "report.png"
WIDTH, HEIGHT = 1280, 800
# Drawing one page takes seconds; this only stops a wedged browser from hanging the target.
DRAW_LIMIT_S = 120


def draw(page: Path, picture: Path, width: int = WIDTH, height: int = HEIGHT) -> Path:
    """A PNG of the first `width` x `height` pixels of `page`, drawn by headless Chromium."""
    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError("no `chromium` on the PATH: `make browser` installs it")
    picture.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stepscope-chromium-") as profile:
        subprocess.run(
            [
                chromium,
                "--headless=new",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--hide-scrollbars",
                "--disable-gpu",
                "--no-first-run",
                # Chromium refuses to start as root with its sandbox on; the page is our own.
                *(["--no-sandbox"] if os.geteuid() == 0 else []),
                f"--screenshot={picture}",
                page.resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=DRAW_LIMIT_S,
        )
    return picture


def write_picture(picture: Path = PICTURE) -> Path:
    """Analyse the straggler scenario and draw its report's first screen into `picture`."""
    with tempfile.TemporaryDirectory(prefix="stepscope-report-picture-") as work:
        ((out, _),) = analyze(str(SCENARIO), Path(work))
        return draw(out / SessionArtifact.REPORT.value, picture)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=PICTURE, help="where to write the PNG")
    args = parser.parse_args(argv)
    written = write_picture(args.out)
    print(f"wrote {written} ({written.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
