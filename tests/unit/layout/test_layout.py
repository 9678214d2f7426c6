"""The folders are the architecture: every package says what it owns, the map names every
package, the layer contracts hold, and the product runs without the dev harness."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ARCHITECTURE = ROOT / "docs" / "contributing" / "architecture.md"
CONCERN_ROOTS = [
    ROOT / "stepscope",
    ROOT / "operator" / "stepscope_operator",
]


def concern_packages() -> list[Path]:
    return sorted(
        init.parent
        for top in CONCERN_ROOTS
        for init in top.rglob("__init__.py")
        if init.parent != top
    )


@pytest.mark.parametrize("package", concern_packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_says_what_it_owns(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
    assert docstring, f"{package.relative_to(ROOT)}/__init__.py needs a docstring: what it owns"


def test_the_architecture_map_names_every_package() -> None:
    text = ARCHITECTURE.read_text()
    unnamed = [
        str(package.relative_to(ROOT))
        for package in concern_packages()
        if f"`{package.relative_to(ROOT)}/`" not in text
        # Packages inside a mapped package (targets/kinds) are described by their parent's row.
        and f"`{package.parent.relative_to(ROOT)}/`" not in text
    ]
    assert not unnamed, (
        f"docs/contributing/architecture.md, 'Folders by concern', lacks a row for {unnamed}"
    )


def test_the_operator_top_level_holds_only_shared_modules() -> None:
    top = ROOT / "operator" / "stepscope_operator"
    modules = {p.stem for p in top.glob("*.py")} - {"__init__"}
    shared = {
        "main", "handlers", "session_modes", "settings", "context",
        "kubeapi", "metrics", "permissions", "errors", "fair_share", "threads",
    }  # fmt: skip
    assert modules <= shared, f"put {sorted(modules - shared)} in the package of its concern"


def test_the_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), str(ROOT / "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:]
    assert "0 broken" in result.stdout


# A violation of each kind, written into a copy of the packages: lint-imports must name it.
VIOLATIONS = {
    "the core imports the operator": (
        "stepscope/api/base.py",
        "import stepscope_operator.settings",
        "The core imports neither the operator",
    ),
    "a cycle between sibling modules": (
        "operator/stepscope_operator/sessions/view.py",
        "import stepscope_operator.sessions.flow",
        "No cycles among sibling packages and modules",
    ),
}


@pytest.mark.parametrize("violation", VIOLATIONS, ids=list(VIOLATIONS))
def test_a_forbidden_import_or_a_cycle_breaks_the_contracts(tmp_path: Path, violation) -> None:
    module, line, contract = VIOLATIONS[violation]
    for folder in ("stepscope", "operator", "agent_image", "dev"):
        shutil.copytree(
            ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    with (tmp_path / module).open("a", encoding="utf-8") as source:
        source.write(f"\n{line}  # noqa: E402, F401\n")
    # The copies come first on the path, so lint-imports reads them, not the installed tree.
    path = [tmp_path, tmp_path / "operator", tmp_path / "agent_image", tmp_path / "dev"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0, result.stdout[-2000:]
    # lint-imports wraps long contract names; the rest of a name up to its verdict is lowercase.
    flat = " ".join(result.stdout.split())
    assert re.search(re.escape(contract) + "[^A-Z]*BROKEN", flat), result.stdout[-4000:]


def test_the_product_runs_without_the_dev_harness(tmp_path: Path) -> None:
    """`stepscope` and `stepscope-operator` start with `stepscope_dev` unimportable, and
    `stepscope dev` is then simply not a command."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    # A meta-path finder placed first refuses the harness, as if it were not installed.
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoDev:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'stepscope_dev' or name.startswith('stepscope_dev.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _NoDev())\n"
        "import importlib.metadata as md\n"
        "_eps = md.entry_points\n"
        "md.entry_points = lambda **kw: [e for e in _eps(**kw) if not e.value.startswith('stepscope_dev')]\n"
    )
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    help_text = subprocess.run(
        [sys.executable, "-m", "stepscope.cli", "--help"],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert help_text.returncode == 0, help_text.stderr
    assert (
        "analyze" in help_text.stdout and "dev" not in help_text.stdout.split("{")[1].split("}")[0]
    )
    dev = subprocess.run(
        [sys.executable, "-m", "stepscope.cli", "dev", "up"],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert dev.returncode == 2 and "invalid choice: 'dev'" in dev.stderr
    operator = subprocess.run(
        [sys.executable, "-c", "import stepscope_operator.main, stepscope_operator.handlers"],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert operator.returncode == 0, operator.stderr


def test_stepscope_dev_is_a_plugin_when_installed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stepscope.cli", "dev", "--help"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "up" in result.stdout


def test_the_wheel_leaves_the_dev_harness_out(tmp_path: Path) -> None:
    # Built from a copy of what the wheel is made of, so setuptools' build/ stays out of the tree.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("stepscope", "operator", "agent_image", "dev"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheels"), str(source)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    (wheel,) = (tmp_path / "wheels").glob("stepscope-*.whl")
    names = subprocess.run(
        [sys.executable, "-m", "zipfile", "-l", str(wheel)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert "stepscope_operator/sessions/flow.py" in names
    assert "stepscope/analysis/reading/reader.py" in names
    assert "stepscope_dev" not in names
