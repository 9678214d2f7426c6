"""The install notes (templates/NOTES.txt) work when pasted into a shell, as helm prints them.

Helm renders NOTES.txt only on install, and `helm install --dry-run` still asks a cluster for
its version, so the notes are rendered here through `helm template`: a copy of the chart gets
the notes' text as a named template, included into a ConfigMap. The template engine, values
and functions are the same ones an install uses.
"""

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_rendering import (
    CHART_DIR,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    REPO_ROOT,
    helm_binary,
    values_args,
)
from stepscope_agent.settings import FLIGHT_RECORDER_ENTRIES, TORCH_FR_BUFFER_ENV

from stepscope.api.session import ProfileSession

PROBE = "templates/notes-probe.yaml"
PROBE_TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: notes-probe
data:
  notes: {{ include "stepscope.notesProbe" . | toJson }}
"""
# A heredoc opener: <<WORD, <<-WORD, <<'WORD' or <<"WORD".
HEREDOC = re.compile(r"<<(?P<dash>-?)\s*(?P<quote>['\"]?)(?P<word>[A-Za-z_]\w*)(?P=quote)")
SESSION_COMMAND = "kubectl apply -n <job-namespace> -f -"


def render_notes(values: dict[str, Any] | None, tmp_dir: Path) -> str:
    """The notes as `helm install` prints them (it trims the text's outer whitespace)."""
    chart = tmp_dir / "chart"
    shutil.copytree(CHART_DIR, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_probe.tpl").write_text(
        '{{ define "stepscope.notesProbe" }}' + notes + "{{ end }}"
    )
    (chart / PROBE).write_text(PROBE_TEMPLATE)
    rendered = subprocess.run(
        [
            str(helm_binary()),
            "template",
            RELEASE,
            str(chart),
            "--namespace",
            NAMESPACE,
            "--kube-version",
            KUBE_VERSION,
            "--show-only",
            PROBE,
            *values_args(values, tmp_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return yaml.safe_load(rendered.stdout)["data"]["notes"].strip()


def heredoc_problems(text: str) -> list[str]:
    """Every heredoc whose terminator a shell would not find: it must be a line of its own
    that starts at column 0 (a `<<-` heredoc strips tabs only, never spaces)."""
    problems = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        for opener in HEREDOC.finditer(line):
            word = opener["word"]
            if opener["dash"]:
                problems.append(f"line {number + 1}: <<-{word} (write <<{word})")
            following = lines[number + 1 :]
            if word in following:
                continue
            indented = [rest for rest in following if rest.strip() == word]
            why = "is indented" if indented else "is missing"
            problems.append(f"line {number + 1}: the terminator {word!r} {why}")
    return problems


def repository_paths(text: str) -> list[str]:
    """Words that name a file or folder of this repository, which an installed chart lacks."""
    entries = [p for p in REPO_ROOT.iterdir() if not p.name.startswith(".")]
    folders = {p.name for p in entries if p.is_dir() and not p.name.endswith(".egg-info")}
    files = {p.name for p in entries if p.is_file()}
    found = []
    for word in text.split():
        bare = word.strip("\"'`()[],.:;")
        if "://" in bare:
            continue
        in_folder = "/" in bare and bare.split("/")[0] in folders
        if in_folder or bare in files or bare.endswith((".py", ".md")):
            found.append(bare)
    return found


def heredoc_body(text: str, command: str) -> str:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if command in line)
    word = HEREDOC.search(lines[start])["word"]
    end = lines.index(word, start + 1)
    return "\n".join(lines[start + 1 : end])


CASES = {
    "defaults": None,
    "operator outside the cluster": {"operator": {"replicas": 0}},
    "static S3 keys": {"s3": {"credentialsSecret": {"name": "stepscope-s3"}}},
    "no webhook": {"webhook": {"enabled": False}, "artifacts": {"enabled": False}},
}


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def notes(request, tmp_path_factory) -> str:
    return render_notes(CASES[request.param], tmp_path_factory.mktemp("notes"))


def test_every_heredoc_in_the_notes_ends_at_column_0(notes):
    assert HEREDOC.search(notes), notes
    assert heredoc_problems(notes) == [], notes


def test_the_notes_name_no_repository_path(notes):
    assert repository_paths(notes) == [], notes


def test_the_pasted_session_is_a_valid_profile_session(notes):
    body = heredoc_body(notes, SESSION_COMMAND).replace("<job-name>", "llama-ft")
    session = ProfileSession.model_validate(yaml.safe_load(body))
    assert session.spec.target.pytorch_job == "llama-ft"


def test_the_notes_say_what_opting_in_changes_in_the_trainer(notes):
    flat = " ".join(notes.split())
    assert f"{TORCH_FR_BUFFER_ENV}={FLIGHT_RECORDER_ENTRIES}" in flat
    for change in ("PYTHONPATH", "optimizer step post-hook", "DataLoader"):
        assert change in flat


def test_the_checks_catch_an_indented_terminator_and_a_repository_path():
    indented = "   kubectl apply -f - <<EOF\n   kind: ProfileSession\n   EOF\n"
    assert heredoc_problems(indented) == ["line 1: the terminator 'EOF' is indented"]
    assert heredoc_problems("cat <<-EOF\nEOF\n") == ["line 1: <<-EOF (write <<EOF)"]
    assert heredoc_problems("cat <<'EOF'\nx\n") == ["line 1: the terminator 'EOF' is missing"]
    assert repository_paths("(see docs/install.md)") == ["docs/install.md"]
    assert repository_paths("edit values.py or README.md") == ["values.py", "README.md"]
    assert repository_paths("label stepscope.dev/inject: https://x.dev/docs/a") == []
