"""Fixtures shared by the reader tests: each parser of ``TraceReader`` in turn."""

from __future__ import annotations

import pytest

from stepscope.analysis.reading.reader import PARSER_ENV, PARSERS


@pytest.fixture(params=PARSERS)
def each_parser(request, monkeypatch) -> str:
    """Runs the test once with the msgspec fast path and once with the ijson fallback,
    named in the environment so that child processes read with it too."""
    monkeypatch.setenv(PARSER_ENV, request.param)
    return request.param
