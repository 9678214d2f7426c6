"""The counts a wire model declares, checked on parsed JSON before pydantic builds anything.

Pydantic refuses a list longer than its ``max_length`` only after it has validated every
item: 1.5 million ``{"rank":0}`` where 64 ranks are allowed cost 1.5 million model
instances (1.6 GB and 17 s) before the length was looked at, and wrongly shaped items as
many error records. `check_counts` walks the parsed JSON beside the model's fields and
refuses the first list or dict longer than its field declares, naming the field and its
bound. It visits only the containers the model declares: a list of step records, which
hold no lists of their own, is measured, never walked, so an honest reply costs a few
hundred steps of Python however large it is.

`unbounded_fields` names every list, dict and string reachable from a model that declares
no bound; a unit test runs it over every model a peer sends, so a field added later cannot
leave one out.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import MaxLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo


class CountExceeded(ValueError):
    """A list or dict in a peer's document is longer than its field allows."""


@dataclass(frozen=True)
class _Container:
    """A list (items) or dict (values) with its declared bound."""

    where: str  # "Model.field", for the error
    max_length: int | None
    items: _Shape | None


@dataclass(frozen=True)
class _Fields:
    """A model's fields that hold containers, by every key they may arrive under."""

    by_key: dict[str, _Shape] = field(default_factory=dict)


@dataclass(frozen=True)
class _OneOf:
    """A union of models; `discriminator` picks the member when the union declares one."""

    members: tuple[_Shape, ...]
    discriminator: str | None = None
    by_tag: dict[str, _Shape] = field(default_factory=dict)


_Shape = _Container | _Fields | _OneOf


def check_counts(model: Any, document: Any) -> None:
    """Raise CountExceeded for the first list or dict in `document` that is longer than
    the bound `model` (a model class, or a type such as a discriminated union of models)
    declares for it. Values of the wrong type are left to pydantic."""
    shape = _model_shape(model) if _is_model(model) else _shape(model, (), repr(model))
    if shape is not None:
        _check(shape, document, "")


def _check(shape: _Shape, value: Any, path: str) -> None:
    if isinstance(shape, _Container):
        if not isinstance(value, list | dict):
            return
        if shape.max_length is not None and len(value) > shape.max_length:
            raise CountExceeded(
                f"{path or 'the body'} holds {len(value):,} items; {shape.where} allows at "
                f"most {shape.max_length:,}"
            )
        if shape.items is not None:
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                _check(shape.items, item, f"{path}.{key}" if path else str(key))
    elif isinstance(shape, _Fields):
        if isinstance(value, dict):
            for key, inner in shape.by_key.items():
                if key in value:
                    _check(inner, value[key], f"{path}.{key}" if path else key)
    elif isinstance(value, dict):
        chosen = shape.by_tag.get(str(value.get(shape.discriminator))) if shape.by_tag else None
        for member in (chosen,) if chosen is not None else shape.members:
            _check(member, value, path)


@cache
def _model_shape(model: type[BaseModel]) -> _Fields | None:
    """The containers below `model`, or None when it holds none (nothing to walk)."""
    by_key: dict[str, _Shape] = {}
    for name, info in model.model_fields.items():
        shape = _shape(info.annotation, info.metadata, f"{model.__name__}.{name}", info)
        if shape is not None:
            for key in {name, info.alias or name, info.validation_alias or name}:
                if isinstance(key, str):
                    by_key[key] = shape
    return _Fields(by_key) if by_key else None


def _shape(
    annotation: Any, metadata: Sequence[Any], where: str, info: FieldInfo | None = None
) -> _Shape | None:
    annotation, metadata = _unwrapped(annotation, metadata)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        # A bound on an optional field (`list[int] | None = Field(max_length=...)`) is the
        # bound of its non-None member.
        members = tuple(
            s for a in args if a is not type(None) if (s := _shape(a, metadata, where)) is not None
        )
        if not members:
            return None
        if len(members) == 1:
            return members[0]
        discriminator = _discriminator([info, *metadata])
        return _OneOf(members, discriminator, _tags(args, discriminator))
    if origin in (list, tuple, set, frozenset, Sequence):
        return _Container(where, _max_length(metadata), _shape(args[0], (), where + "[]"))
    if origin in (dict, Mapping):
        return _Container(where, _max_length(metadata), _shape(args[1], (), where + "[]"))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_shape(annotation)
    return None


def _discriminator(metadata: Sequence[Any]) -> str | None:
    """The field a union is told apart by (``Field(discriminator=...)``), if it has one."""
    for item in metadata:
        if isinstance(item, FieldInfo) and isinstance(item.discriminator, str):
            return item.discriminator
    return None


def _tags(members: tuple[Any, ...], discriminator: str | None) -> dict[str, _Shape]:
    """Each member model by the value of its discriminator field."""
    tags: dict[str, _Shape] = {}
    for member in members:
        if discriminator is None or not _is_model(member):
            continue
        shape = _model_shape(member)
        tag_field = member.model_fields.get(discriminator)
        if shape is None or tag_field is None:
            continue
        for tag in get_args(tag_field.annotation):
            tags[str(tag.value if isinstance(tag, Enum) else tag)] = shape
    return tags


def _unwrapped(annotation: Any, metadata: Sequence[Any]) -> tuple[Any, list[Any]]:
    """The type inside any Annotated layers, with their metadata gathered."""
    gathered = list(metadata)
    while get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        gathered += extra
    return annotation, gathered


def _max_length(metadata: Sequence[Any]) -> int | None:
    for item in metadata:
        if isinstance(item, MaxLen):
            return item.max_length
        if isinstance(item, FieldInfo):
            found = _max_length(item.metadata)
            if found is not None:
                return found
    return None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def unbounded_fields(model: type[BaseModel]) -> Iterator[str]:
    """Every list, dict, dict key and string reachable from `model` without a declared
    ``max_length``, as "Model.field" paths. Strings bounded by a pattern, literals and
    enums are bounded; ``Any`` is left to the document's byte and value limits."""
    seen: set[type[BaseModel]] = set()

    def walk(annotation: Any, metadata: Sequence[Any], where: str) -> Iterator[str]:
        annotation, metadata = _unwrapped(annotation, metadata)
        origin, args = get_origin(annotation), get_args(annotation)
        bounded = _max_length(metadata) is not None
        if origin in (Union, types.UnionType):
            for arg in args:
                yield from walk(arg, metadata, where)
        elif origin in (list, tuple, set, frozenset, Sequence):
            yield from () if bounded else (where,)
            yield from walk(args[0], (), where + "[]")
        elif origin in (dict, Mapping):
            yield from () if bounded else (where,)
            yield from walk(args[0], (), where + "{key}")
            yield from walk(args[1], (), where + "{}")
        elif annotation is str and not bounded and not _has_pattern(metadata):
            yield where
        elif _is_model(annotation) and annotation not in seen:
            seen.add(annotation)
            for name, info in annotation.model_fields.items():
                yield from walk(info.annotation, info.metadata, f"{annotation.__name__}.{name}")
        elif origin is Literal or annotation is Any:
            return

    yield from walk(model, (), model.__name__)


def _has_pattern(metadata: Sequence[Any]) -> bool:
    for item in metadata:
        if getattr(item, "pattern", None):
            return True
        if isinstance(item, FieldInfo) and _has_pattern(item.metadata):
            return True
    return False
