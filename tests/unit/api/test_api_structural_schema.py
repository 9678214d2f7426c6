"""The generated schemas are structural and document every field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from stepscope.api.crds import KINDS, build_crd
from stepscope.api.structural import SchemaError, structural_schema

ALLOWED = {
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
    "items",
    "properties",
    "additionalProperties",
    "required",
    "x-kubernetes-map-type",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
}


def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def version_schema(kind) -> dict[str, Any]:
    return build_crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_schema_is_structural(kind) -> None:
    for path, node in walk(version_schema(kind), kind.kind):
        assert "type" in node, f"{path} has no type"
        assert set(node) <= ALLOWED, f"{path} uses {set(node) - ALLOWED}"
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if "properties" in node:
            assert "additionalProperties" not in node, path
            assert set(node.get("required", [])) <= set(node["properties"]), path


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_every_field_says_desired_or_observed(kind) -> None:
    schema = version_schema(kind)
    for part, state in (("spec", "Desired state."), ("status", "Observed state.")):
        for path, node in walk(schema["properties"][part], f"{kind.kind}.{part}"):
            if path.endswith(("[]", "{}")) or path.count(".") == 1:
                continue  # List items and map values are described by their field.
            assert node.get("description", "").startswith(state), path


def test_session_schema_carries_the_rules() -> None:
    spec = version_schema(KINDS[0])["properties"]["spec"]
    target, window = spec["properties"]["target"], spec["properties"]["window"]
    assert "exactly one of pytorchJob" in target["x-kubernetes-validations"][0]["message"]
    steps = window["properties"]["steps"]
    assert (steps["minimum"], steps["maximum"], "default" in steps) == (1, 1000, False)
    assert window["properties"]["warmupSteps"]["maximum"] == 100
    assert window["properties"]["startStep"]["minimum"] == 0
    assert "nullable" not in window["properties"]["startStep"]
    # Whole default objects: the server checks a default against CEL before nested defaults.
    assert window["default"] == {
        "warmupSteps": 1,
        "leadSeconds": 10,
        "timeoutSeconds": 900,
        "repeat": 1,
    }
    repeat = window["properties"]["repeat"]
    assert (repeat["minimum"], repeat["maximum"], repeat["default"]) == (1, 10, 1)
    assert spec["properties"]["artifacts"]["default"] == {}
    assert spec["properties"]["granularity"]["enum"] == ["steps", "ops", "full"]
    assert spec["required"] == ["target"]


def test_status_conditions_are_a_map_keyed_by_type() -> None:
    conditions = version_schema(KINDS[0])["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) == {
        "type",
        "status",
        "lastTransitionTime",
        "reason",
    }


def test_unions_of_types_are_refused() -> None:
    class Loose(BaseModel):
        value: int | str

    with pytest.raises(SchemaError, match="Loose.value: a union of several types"):
        structural_schema(Loose)


def test_free_form_objects_are_refused() -> None:
    class Loose(BaseModel):
        value: dict[str, Any]

    with pytest.raises(SchemaError, match="Loose.value"):
        structural_schema(Loose)


def test_exclusive_bounds_use_openapi_v3_booleans() -> None:
    spec = version_schema(KINDS[1])["properties"]["spec"]
    threshold = spec["properties"]["regression"]["properties"]["thresholdPct"]
    assert (threshold["minimum"], threshold["exclusiveMinimum"]) == (0, True)
