"""Render the Helm chart with the real helm binary (built from its Go module, cached), for tests.

Unit tests only template (no cluster); tests/integration/chart imports the same helpers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART_DIR = REPO_ROOT / "charts" / "stepscope"
RELEASE = "stepscope"
# The Kubernetes version `helm template` renders for (a real install uses the cluster's).
KUBE_VERSION = "1.37.2"
NAMESPACE = "stepscope-system"


def helm_binary() -> Path:
    """The pinned helm the local control plane also uses; built once into the cache."""
    from stepscope_dev.build import bin_dir, build_recipe, recipes

    target = bin_dir()
    helm = target / "helm"
    if not helm.exists():
        target.mkdir(parents=True, exist_ok=True)
        [recipe] = [r for r in recipes() if r.name == "helm"]
        build_recipe(recipe, target)
    return helm


def values_args(values: dict[str, Any] | None, tmp_dir: Path) -> list[str]:
    if not values:
        return []
    path = tmp_dir / "values.json"
    path.write_text(json.dumps(values))
    return ["-f", str(path)]


def helm_template_text(
    values: dict[str, Any] | None,
    tmp_dir: Path,
    *,
    namespace: str = NAMESPACE,
    check: bool = True,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(helm_binary()),
            "template",
            RELEASE,
            str(CHART_DIR),
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            *values_args(values, tmp_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def render(values: dict[str, Any] | None, tmp_dir: Path, **kwargs: Any) -> list[dict[str, Any]]:
    """Every object the chart renders with these values."""
    text = helm_template_text(values, tmp_dir, **kwargs).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def granted(objects: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str]]]:
    """(group, resource, verb) triples granted by each rendered Role/ClusterRole, keyed by
    'Kind/namespace/name'."""
    grants: dict[str, set[tuple[str, str, str]]] = {}
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        key = f"{role['kind']}/{role['metadata'].get('namespace', '')}/{role['metadata']['name']}"
        triples = grants.setdefault(key, set())
        for rule in role.get("rules", []):
            assert "resourceNames" not in rule or rule["resourceNames"], rule
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        triples.add((group, resource, verb))
    return grants
