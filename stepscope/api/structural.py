"""Turn a pydantic model's JSON Schema into a Kubernetes structural OpenAPI v3 schema.

The API server only accepts *structural* schemas: every node has a type, no ``$ref``, no
``anyOf`` of different types, ``additionalProperties`` only for maps. Pydantic emits JSON
Schema 2020-12 with references and ``anyOf [T, null]`` for optional fields, so this module
inlines references and collapses optionals. Anything it does not know how to translate
raises `SchemaError` instead of slipping into the CRD.

Python ``None`` means "unset" here: optional fields are not ``nullable``, and the API server
prunes an explicit ``null`` on such a field, which makes it the same as leaving it out.
That keeps CEL's ``has()`` a reliable test for "set".
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel

from stepscope.api.rules import X_VALIDATIONS

# Keywords copied as they are, in the order they are written out, so the YAML reads the
# same on every run and every pydantic version.
_ORDER = (
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
)
# JSON Schema keywords with no meaning for the API server.
_DROPPED = frozenset({"title", "$defs"})


class SchemaError(ValueError):
    """The model uses a construct that has no structural OpenAPI equivalent."""


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of `model`, with camelCase property names."""
    json_schema = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(json_schema, json_schema.get("$defs", {}), model.__name__)


def _convert(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    node = _resolve(node, defs, where)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {
                name: _convert(child, defs, f"{where}.{name}") for name, child in value.items()
            }
        elif key == "items":
            out[key] = _convert(value, defs, f"{where}[]")
        elif key == "additionalProperties":
            # Objects with properties drop unknown keys by pruning; only maps keep this.
            if "properties" not in node:
                if not isinstance(value, dict):
                    raise SchemaError(f"{where}: free-form objects are not structural")
                out[key] = _convert(value, defs, f"{where}{{}}")
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            # OpenAPI v3.0 writes an exclusive bound as a boolean next to the bound.
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "description":
            out[key] = prose(value)
        elif key == "default":
            if value is not None:
                out[key] = value
        elif key in _ORDER:
            out[key] = value
        else:
            raise SchemaError(f"{where}: JSON Schema keyword {key!r} has no structural equivalent")
    if "type" not in out:
        raise SchemaError(f"{where}: every schema node needs a type")
    return {key: out[key] for key in _ORDER if key in out}


def prose(text: str) -> str:
    """A docstring as ``kubectl explain`` shows it best: paragraphs of unwrapped lines."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)


def _resolve(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    """Inline ``$ref`` and collapse ``anyOf [T, null]`` into T, keeping the outer keywords."""
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        return _resolve(_merge(target, node), defs, where)
    if "allOf" in node:
        (only,) = node.pop("allOf")
        return _resolve(_merge(_resolve(only, defs, where), node), defs, where)
    if "anyOf" in node:
        choices = [choice for choice in node.pop("anyOf") if choice.get("type") != "null"]
        if len(choices) != 1:
            raise SchemaError(f"{where}: a union of several types is not structural")
        return _resolve(_merge(_resolve(choices[0], defs, where), node), defs, where)
    return node


def _merge(inner: dict[str, Any], outer: dict[str, Any]) -> dict[str, Any]:
    """The field's own keywords (`outer`) over its type's (`inner`); rules from both apply."""
    merged = {**inner, **outer}
    rules = inner.get(X_VALIDATIONS, []) + outer.get(X_VALIDATIONS, [])
    if rules:
        merged[X_VALIDATIONS] = rules
    return merged
