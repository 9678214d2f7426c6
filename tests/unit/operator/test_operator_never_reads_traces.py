"""The operator's modules load no raw-trace reader; the import audit that the operator
fixtures run it under catches one that does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import import_audit

AUDITED = """
import sys
sys.path.insert(0, {support!r})
from import_audit import _install
_install({audit!r})
for module in {modules!r}:
    __import__(module)
"""


def _imports_under_audit(tmp_path: Path, *modules: str) -> list[str]:
    audit = tmp_path / "imports"
    script = AUDITED.format(
        support=str(import_audit.SCRIPT.parent), audit=str(audit), modules=modules
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    return import_audit.forbidden_imports(audit)


def test_the_operator_imports_no_trace_reader(tmp_path):
    modules = (
        "stepscope_operator.main",
        "stepscope_operator.handlers",
        "stepscope_operator.sessions.flow",
        "stepscope_operator.sessions.rendering",
    )
    assert _imports_under_audit(tmp_path, *modules) == []


def test_the_audit_sees_a_trace_reader_imported(tmp_path):
    found = _imports_under_audit(tmp_path, "stepscope.analysis.reports.merged_trace")
    assert "stepscope.analysis.reports.merged_trace" in found
    assert "stepscope.analysis.reading.reader" in found
