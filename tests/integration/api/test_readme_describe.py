"""The README's `kubectl describe` blocks are what the current code and real kubectl print.

Each status is derived at test time by the current code and the operator's own status
functions: the profiling example's from the straggler scenario's real traces
(stepscope_dev.describe_example), the hang check's from real agents' hang dumps
(stepscope_dev.hang_example). Each is written through the status subresource of a session from
crds/examples on the real API server and printed by real `kubectl describe`; its excerpt must
equal the README's block line for line. A changed analysis, attribution, model or kubectl shows
here first; `make docs-examples` rewrites the blocks.
"""

from __future__ import annotations

import pytest
from stepscope_dev import hang_example
from stepscope_dev.describe_example import README, describe_lines, excerpt, readme_block

pytestmark = pytest.mark.integration


def test_readme_describe_block_is_what_the_current_code_prints(crds_installed, namespace) -> None:
    current = excerpt(describe_lines(crds_installed, namespace))
    written = readme_block(README.read_text(encoding="utf-8"))
    assert written == current, (
        "README.md's describe block is not what the current code prints; run "
        "`make docs-examples` (it rewrites the block with):\n" + "\n".join(current)
    )


def test_readme_hang_block_is_what_the_current_code_prints(crds_installed, namespace) -> None:
    current = excerpt(hang_example.describe_lines(crds_installed, namespace), hang_example.KEPT)
    written = hang_example.readme_block(README.read_text(encoding="utf-8"))
    assert written == current, (
        "README.md's hang-check describe block is not what the current code prints; run "
        "`make docs-examples` (it rewrites the block with):\n" + "\n".join(current)
    )
