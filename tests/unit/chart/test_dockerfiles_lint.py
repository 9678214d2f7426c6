"""The two images, checked without a Docker engine: hadolint's rules plus what stepscope needs
of them (pinned base, non-root, only their own packages and extras)."""

import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = {
    "operator": REPO_ROOT / "operator" / "Dockerfile",
    "agent": REPO_ROOT / "agent_image" / "Dockerfile",
}
HADOLINT = Path(sysconfig.get_path("scripts")) / "hadolint"


def hadolint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(HADOLINT), "--no-color", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_hadolint_finds_nothing(image):
    result = hadolint(DOCKERFILES[image])
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    result = hadolint(bad)
    assert result.returncode != 0 and "DL3007" in result.stdout


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_base_is_an_exact_python_311_slim_release(image):
    text = DOCKERFILES[image].read_text()
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base
    stages = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert stages and all(s == "${PYTHON_IMAGE}" for s in stages)


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_runs_as_a_numeric_non_root_user(image):
    users = re.findall(r"^USER (\S+)$", DOCKERFILES[image].read_text(), re.MULTILINE)
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"


def copied_sources(text):
    return [
        line.split()[1]
        for line in text.splitlines()
        if line.startswith("COPY ") and not line.startswith("COPY --from")
    ]


def test_operator_image_has_the_operator_extra_and_nothing_of_the_agent():
    text = DOCKERFILES["operator"].read_text()
    assert '".[operator]"' in text
    assert copied_sources(text) == ["pyproject.toml", "stepscope/", "operator/"]


def test_agent_image_has_the_sidecar_extra_and_no_torch():
    text = DOCKERFILES["agent"].read_text()
    assert '".[sidecar]"' in text
    assert not [s for s in copied_sources(text) if s.startswith(("operator", "dev"))]
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    sidecar_extra = re.search(r"^sidecar = \[(.*?)\]", pyproject, re.MULTILINE | re.DOTALL)[1]
    assert "torch" not in sidecar_extra
