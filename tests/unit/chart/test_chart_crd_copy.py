"""The chart's CRDs are exactly what `make crds` generates from the pydantic models."""

import json

import yaml
from chart_rendering import CHART_DIR, by_kind, render

from stepscope.api.crdgen import CHART_OUT, render_crds


def test_chart_crds_match_the_models():
    assert CHART_OUT == CHART_DIR / "files" / "crds"
    expected = render_crds()
    present = {p.name for p in CHART_OUT.glob("*.yaml")}
    assert present == set(expected), (
        f"{CHART_OUT} holds {sorted(present)}, the models give {sorted(expected)}: run `make crds`"
    )
    drifted = [
        name
        for name, text in expected.items()
        if (CHART_OUT / name).read_text(encoding="utf-8") != text
    ]
    assert not drifted, f"chart CRDs out of date with stepscope/api: {drifted}; run `make crds`"


def test_rendered_crds_are_the_generated_files_plus_labels(tmp_path):
    """The template round-trips the files through fromYaml/toYaml; nothing else may change
    (e.g. an integer turned into a float)."""
    rendered = {
        c["metadata"]["name"]: c
        for c in by_kind(render(None, tmp_path), "CustomResourceDefinition")
    }
    generated = [yaml.safe_load(text) for text in render_crds().values()]
    assert sorted(rendered) == sorted(c["metadata"]["name"] for c in generated)
    for crd in generated:
        ours = rendered[crd["metadata"]["name"]]
        assert json.dumps(ours["spec"], sort_keys=True) == json.dumps(crd["spec"], sort_keys=True)
        assert {k: v for k, v in ours.items() if k != "metadata"} == {
            k: v for k, v in crd.items() if k != "metadata"
        }
