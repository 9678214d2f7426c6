"""Free text in status, clipped where it is made so that a status write never fails on it.

A status field that quotes what went wrong (an upload error naming the object key, an
agent's reason, an exception's message) has no natural length, while the CRD bounds
every string so the status stays small. A value that is too long is therefore cut to
the field's limit, ending in an ellipsis, when the model is built; the schema's
``maxLength`` is the same number, so the API server accepts whatever the model holds.
(Refusing it instead made the status write fail and the session retry until it gave
up.) Reasons and ids that programs match on are not free text: they stay validated.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

ELLIPSIS = "…"


def clip_text(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its start and an ellipsis."""
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS


def BoundedText(max_length: int) -> Any:
    """A string type clipped to `max_length` characters, with ``maxLength`` in the schema.

    Non-strings pass through untouched for pydantic to refuse as usual.
    """

    def clip(value: object) -> object:
        return clip_text(value, max_length) if isinstance(value, str) else value

    return Annotated[str, BeforeValidator(clip), Field(max_length=max_length)]
