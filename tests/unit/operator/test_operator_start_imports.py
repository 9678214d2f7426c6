"""The operator starts without scipy: its statistics load when a session is first compared.

scipy.stats takes about half a second of CPU to import, and every operator start (a restart, a
new replica, each test's operator) paid it for models that do not need it."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import stepscope_operator.main
started = "scipy" in sys.modules
from stepscope_operator.sessions.comparing import noise_band_pct
band = noise_band_pct([100.0, 104.0, 98.0])
print(json.dumps({"started": started, "compared": "scipy.stats" in sys.modules, "band": band}))
"""


def test_scipy_loads_at_the_first_comparison_not_at_start():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, timeout=120
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["started"] is False
    assert seen["compared"] is True
    # t(0.975, 2) = 4.303 x the log medians' sd 0.0306 x sqrt(1 + 1/3): exp(0.152) - 1 = 16.2%.
    assert 16.1 < seen["band"] < 16.3, seen
