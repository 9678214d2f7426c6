"""Read access leaves the operator by two paths only: every presigned URL it signs is an upload
grant, except the artifact endpoint's GET links for a session's readers (docs/operations/security.md,
"Reading artifacts") and the GETs of its own inputs handed to the session's analysis Job in
the session's namespace (grants.get_url, "The analysis Job")."""

import ast
from pathlib import Path

import stepscope_operator

PACKAGE_DIR = Path(stepscope_operator.__file__).parent
READ_OPERATIONS = ("get_", "head_", "list_", "select_")


def signed_operations() -> list[tuple[str, str]]:
    """(module, S3 operation) of every generate_presigned_url call in the operator."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == (
                "generate_presigned_url"
            ):
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                    f"{path}:{node.lineno}: sign a literal S3 operation so this test can "
                    "tell uploads from reads"
                )
                found.append((path.relative_to(PACKAGE_DIR).as_posix(), first.value))
    return found


def test_only_the_artifact_endpoint_signs_reads():
    operations = signed_operations()
    reads = {(module, op) for module, op in operations if op.startswith(READ_OPERATIONS)}
    assert reads == {("access/artifacts.py", "get_object"), ("storage/grants.py", "get_object")}
    callers = {
        path.relative_to(PACKAGE_DIR).as_posix()
        for path in PACKAGE_DIR.rglob("*.py")
        if "get_url(" in path.read_text() and path.name != "grants.py"
    }
    assert callers == {"sessions/rendering.py"}, (
        "only the analysis Job's plan may carry read grants"
    )
    # The rest are the agents' upload grants.
    assert {op for _, op in operations} - {"get_object"}
