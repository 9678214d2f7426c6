import re
import subprocess
from pathlib import Path

import pytest
from stepscope_operator.agent_token import agent_token_for_namespace


def test_token_is_stable_per_namespace_and_differs_across_namespaces():
    a1 = agent_token_for_namespace("master-secret", "team-a")
    assert a1 == agent_token_for_namespace("master-secret", "team-a")
    assert a1 != agent_token_for_namespace("master-secret", "team-b")
    assert a1 != agent_token_for_namespace("other-master", "team-a")
    assert len(a1) == 64 and "master-secret" not in a1


@pytest.mark.parametrize(
    ("master", "namespace", "field"), [("", "ns", "STEPSCOPE_AGENT_TOKEN"), ("m", "", "namespace")]
)
def test_empty_inputs_are_refused(master, namespace, field):
    with pytest.raises(ValueError, match=field):
        agent_token_for_namespace(master, namespace)


def test_the_shell_recipe_in_docs_install_md_derives_the_same_token():
    """docs/install.md tells users to derive a namespace token with openssl; it must agree."""
    docs = (Path(__file__).resolve().parents[3] / "docs" / "install.md").read_text()
    [recipe] = re.findall(r"^printf 'stepscope-agent-token.*$", docs, re.MULTILINE)
    result = subprocess.run(
        ["bash", "-c", recipe],
        env={"MASTER": "master-secret", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.strip() == agent_token_for_namespace("master-secret", "team-a")
