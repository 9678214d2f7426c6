"""Run the real operator under an import audit: it must never load a raw-trace reader.

The operator never opens a raw trace (DESIGN §10): the merged trace and the report are
built by the analysis Job. This launcher shows it for every test that runs the operator:
it installs an audit hook (`sys.addaudithook`, PEP 578) that writes the name of any module
in `RAW_TRACE_MODULES` the process imports to the file in `AUDIT_FILE_ENV`, then runs
`stepscope_operator.main` as ``python -m`` would. The fixtures fail a test whose operator
imported one (`forbidden_imports`).

Run it as ``python tests/support/import_audit.py <operator args>``.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

AUDIT_FILE_ENV = "STEPSCOPE_TEST_IMPORT_AUDIT"
RAW_TRACE_MODULES = frozenset(
    {
        # The trace reader and everything that streams or renders many ranks' traces.
        "stepscope.analysis.reading.reader",
        "stepscope.analysis.rank.summary",
        "stepscope.analysis.reports.merged_trace",
        "stepscope.analysis.reports.rank_track",
        "stepscope.analysis.reports.html",
        # The streaming JSON parser the reader is built on.
        "ijson",
    }
)
SCRIPT = Path(__file__).resolve()


def forbidden_imports(audit_file: Path) -> list[str]:
    """The raw-trace modules the audited process imported, in the order it did."""
    return audit_file.read_text().split() if audit_file.exists() else []


def _install(audit_file: str) -> None:
    def hook(event: str, args: tuple) -> None:
        if event == "import" and args[0] in RAW_TRACE_MODULES:
            with open(audit_file, "a") as record:
                record.write(args[0] + "\n")

    sys.addaudithook(hook)


if __name__ == "__main__":
    _install(os.environ[AUDIT_FILE_ENV])
    sys.argv = ["stepscope_operator.main", *sys.argv[1:]]
    # python -m puts the working directory first on the path, not the script's directory.
    sys.path[0] = os.getcwd()
    runpy.run_module("stepscope_operator.main", run_name="__main__", alter_sys=True)
