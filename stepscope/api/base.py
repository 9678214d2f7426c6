"""The base of every API model: camelCase on the wire, object-level CEL rules, strict keys."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from stepscope.api.rules import X_VALIDATIONS, CelRule


def _add_object_rules(schema: dict[str, Any], model: type[BaseModel]) -> None:
    rules = getattr(model, "cel_rules", ())
    if rules:
        schema.setdefault(X_VALIDATIONS, []).extend(rule.to_validation() for rule in rules)


class ApiModel(BaseModel):
    """A part of a custom resource.

    Fields are snake_case in Python and camelCase on the wire; both spellings are
    accepted on input. Unknown keys are refused, as ``kubectl apply`` refuses them (it
    validates field names strictly), so a typo fails in Python the way it fails on the
    server. Rules that relate several fields go in `cel_rules`: they become the object's
    ``x-kubernetes-validations`` and are checked here after the fields are valid.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        json_schema_extra=_add_object_rules,
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = ()

    @model_validator(mode="after")
    def _enforce_object_rules(self) -> Self:
        for rule in type(self).cel_rules:
            rule.enforce(self)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict as the API server stores it: camelCase, unset fields omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
