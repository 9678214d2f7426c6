import subprocess

from chart_rendering import CHART_DIR, helm_binary


def test_helm_lint_strict_passes():
    result = subprocess.run(
        [str(helm_binary()), "lint", "--strict", str(CHART_DIR)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
