"""The README's `stepscope diff` block is what the current code prints for the two recorded
scenarios it names (stepscope_dev.diff_example): a change in the analysis or the comparison
shows up here, and `make docs-examples` rewrites the block."""

from __future__ import annotations

from stepscope_dev.diff_example import MARKER, README, diff_lines
from stepscope_dev.readme_blocks import block_lines


def test_readme_diff_block_is_what_the_current_code_prints() -> None:
    current = diff_lines()
    assert current[0].startswith("verdict: slower by")
    written = block_lines(README.read_text(encoding="utf-8"), MARKER)
    assert written == current, (
        "README.md's diff block is not what the current code prints; run "
        "`make docs-examples` (it rewrites the block with):\n" + "\n".join(current)
    )
