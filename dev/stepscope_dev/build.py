"""Build the local control plane's binaries from their Go modules.

Every binary is compiled with the machine's Go toolchain from a pinned module
version, inside a small wrapper module under the cache, so nothing built or
downloaded ever lands in the repository. A binary that is already in the cache
is not rebuilt.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, TypeVar

from stepscope_dev import versions

CACHE_ENV = "STEPSCOPE_CACHE_DIR"


def cache_root() -> Path:
    """Where sources and binaries are cached: $STEPSCOPE_CACHE_DIR or ~/.cache/stepscope."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "stepscope"


def bin_dir() -> Path:
    return cache_root() / "bin" / versions.BIN_SET


_held = threading.local()
_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextmanager
def cache_lock() -> Iterator[None]:
    """Hold the cache's build lock: one process at a time builds into the shared cache.

    Parallel test workers, a test run beside ``make demo`` and a fixture beside ``make
    binaries`` all reach the same recipes on a cold cache; two builds of one recipe would each
    clear the other's staging directory. The lock is re-entrant within a thread, since one
    ``ensure_*`` step calls another."""
    if getattr(_held, "depth", 0):
        _held.depth += 1
        try:
            yield
        finally:
            _held.depth -= 1
        return
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / "build.lock", "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        _held.depth = 1
        try:
            yield
        finally:
            _held.depth = 0
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def holding_cache_lock(build: Callable[_P, _R]) -> Callable[_P, _R]:
    """``build`` under ``cache_lock``: it sees the cache as the previous holder left it."""

    @functools.wraps(build)
    def locked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with cache_lock():
            return build(*args, **kwargs)

    return locked


@dataclass(frozen=True)
class GoRecipe:
    """How to build one or more binaries from a pinned Go module."""

    name: str
    module: str
    version: str
    # Package path -> output binary name.
    packages: dict[str, str]
    ldflags: tuple[str, ...] = ()
    # Set for k8s.io/kubernetes, whose go.mod points its staging modules at
    # in-tree paths that do not exist in the published module.
    replace_staging_modules: bool = False
    replaces: dict[str, str] = field(default_factory=dict)
    # Set for binaries a test fixture builds lazily beside running tests.
    nice: bool = False

    def outputs(self, target: Path) -> list[Path]:
        return [target / binary for binary in self.packages.values()]


def _kubernetes_version_ldflags() -> tuple[str, ...]:
    # Without these, a module build reports v0.0.0-master and kubectl refuses
    # to talk to a server whose version it cannot parse sensibly.
    major, minor = versions.KUBERNETES.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={versions.KUBERNETES}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


def _kubernetes_staging_replaces(gomod_text: str) -> dict[str, str]:
    """Replace every in-tree staging module with its published release."""
    replaces = {}
    for line in gomod_text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            replaces[parts[0]] = versions.KUBERNETES_STAGING
    if not replaces:
        raise RuntimeError("found no staging replaces in k8s.io/kubernetes go.mod")
    return replaces


def recipes() -> list[GoRecipe]:
    return [
        GoRecipe(
            name="etcd",
            module="go.etcd.io/etcd/server/v3",
            version=versions.ETCD,
            packages={"go.etcd.io/etcd/server/v3": "etcd"},
        ),
        GoRecipe(
            name="versitygw",
            module="github.com/versity/versitygw",
            version=versions.VERSITYGW,
            packages={"github.com/versity/versitygw/cmd/versitygw": "versitygw"},
        ),
        GoRecipe(
            name="helm",
            module="helm.sh/helm/v3",
            version=versions.HELM,
            packages={"helm.sh/helm/v3/cmd/helm": "helm"},
            ldflags=(f"-X helm.sh/helm/v3/internal/version.version={versions.HELM}",),
        ),
        GoRecipe(
            name="kubernetes",
            module="k8s.io/kubernetes",
            version=versions.KUBERNETES,
            packages={
                "k8s.io/kubernetes/cmd/kube-apiserver": "kube-apiserver",
                "k8s.io/kubernetes/cmd/kube-controller-manager": "kube-controller-manager",
                "k8s.io/kubernetes/cmd/kubectl": "kubectl",
            },
            ldflags=_kubernetes_version_ldflags(),
            replace_staging_modules=True,
        ),
    ]


def node_recipes() -> list[GoRecipe]:
    """The binaries only the real node (`stepscope dev up --node real`) needs.

    kubelet and kube-scheduler (the process pod runner binds pods itself; a real node needs a
    real scheduler) come from the same k8s.io/kubernetes module as the control plane, so their
    build reuses the Go build cache of every package they share. They build in a wrapper module
    of their own: `go mod tidy` for kubelet's imports must not change the control plane's
    go.sum. kube-proxy is not built: the API server reaches webhook Services through their
    endpoints (docs/contributing/local-control-plane.md, "Real node"). CoreDNS is the node's
    cluster DNS (``realnode.cluster_dns``), built from its module's root package (upstream's
    ``main``).
    """
    return [
        GoRecipe(
            name="kubelet",
            module="k8s.io/kubernetes",
            version=versions.KUBERNETES,
            packages={
                "k8s.io/kubernetes/cmd/kubelet": "kubelet",
                "k8s.io/kubernetes/cmd/kube-scheduler": "kube-scheduler",
            },
            ldflags=_kubernetes_version_ldflags(),
            replace_staging_modules=True,
            nice=True,
        ),
        GoRecipe(
            name="coredns",
            module="github.com/coredns/coredns",
            version=versions.COREDNS,
            packages={"github.com/coredns/coredns": f"coredns-{versions.COREDNS}"},
            nice=True,
        ),
    ]


def _log(message: str) -> None:
    print(f"[stepscope dev build] {message}", file=sys.stderr, flush=True)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # The wrapper modules resolve exact versions; never let a stale GOFLAGS
    # (for example -mod=vendor) change that.
    env.pop("GOFLAGS", None)
    env.setdefault("CGO_ENABLED", "0")
    return env


def _run_go(
    args: list[str],
    cwd: Path,
    label: str,
    *,
    env: dict[str, str] | None = None,
    nice: bool = False,
) -> None:
    """Run a go command, turning `-v` package lines into periodic progress.

    ``nice`` lowers its priority: builds that a test fixture starts lazily must not starve the
    tests and servers running beside them."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [*(("nice", "-n", "10") if nice else ()), "go", *args],
        cwd=cwd,
        env=env or _go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    packages = 0
    tail: list[str] = []
    last_report = started
    for raw_line in proc.stdout:
        line = raw_line.rstrip()
        tail = (tail + [line])[-40:]
        if line and not line.startswith(("go: ", "#")):
            packages += 1
        now = time.monotonic()
        if now - last_report >= 30:
            _log(f"{label}: {packages} packages so far, {now - started:.0f}s")
            last_report = now
    if proc.wait() != 0:
        raise RuntimeError(f"`go {' '.join(args[:2])}` for {label} failed:\n" + "\n".join(tail))


def compile_package(
    src: Path,
    package: str,
    binary: Path,
    *,
    label: str,
    ldflags: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    nice: bool = False,
) -> None:
    """``go build`` one main package of the module in ``src`` into ``binary``, with progress.

    The binary is written beside its final name and moved into place only once complete, so an
    interrupted build is never mistaken for a finished one."""
    partial = binary.with_name(binary.name + ".partial")
    started = time.monotonic()
    _log(f"{label}: compiling {package} (several minutes when cold)")
    flags = " ".join(("-s", "-w", *ldflags))
    _run_go(
        ["build", "-v", "-trimpath", "-ldflags", flags, "-o", str(partial), package],
        src,
        label,
        env=env,
        nice=nice,
    )
    os.replace(partial, binary)
    _log(f"{label}: built {binary.name} in {time.monotonic() - started:.0f}s")


def resolve_modules(src: Path, label: str, *, nice: bool = False) -> None:
    """``go mod tidy`` in the wrapper module ``src``: pin every module its imports need."""
    _log(f"{label}: resolving modules in {src}")
    _run_go(["mod", "tidy"], src, label, nice=nice)


def _write_wrapper(recipe: GoRecipe, src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    lines = [
        f"module stepscope.local/build/{recipe.name}",
        "",
        "go 1.26",
        "",
        f"require {recipe.module} {recipe.version}",
        "",
    ]
    if recipe.replaces:
        lines.append("replace (")
        lines += [f"\t{mod} => {mod} {ver}" for mod, ver in sorted(recipe.replaces.items())]
        lines.append(")")
    (src / "go.mod").write_text("\n".join(lines) + "\n")
    imports = "\n".join(f'\t_ "{pkg}"' for pkg in recipe.packages)
    (src / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")


def _with_staging_replaces(recipe: GoRecipe, src: Path) -> GoRecipe:
    if not recipe.replace_staging_modules:
        return recipe
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{recipe.module}@{recipe.version}"],
        cwd=src,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    gomod = Path(json.loads(result.stdout)["GoMod"]).read_text()
    return GoRecipe(**{**recipe.__dict__, "replaces": _kubernetes_staging_replaces(gomod)})


def build_recipe(recipe: GoRecipe, target: Path) -> None:
    if all(path.exists() for path in recipe.outputs(target)):
        return
    src = cache_root() / "src" / f"{recipe.name}-{recipe.version}"
    src.mkdir(parents=True, exist_ok=True)
    recipe = _with_staging_replaces(recipe, src)
    _write_wrapper(recipe, src)
    _log(f"{recipe.name} {recipe.version}: resolving modules")
    _run_go(["mod", "tidy"], src, recipe.name, nice=recipe.nice)
    staging = target / f".{recipe.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _log(f"{recipe.name} {recipe.version}: compiling {', '.join(recipe.packages.values())}")
    started = time.monotonic()
    ldflags = " ".join(("-s", "-w", *recipe.ldflags))
    for package, binary in recipe.packages.items():
        # One package at a time with an explicit output name: Go would name a
        # module root like go.etcd.io/etcd/server/v3 after "server".
        _run_go(
            ["build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(staging / binary), package],
            src,
            binary,
            nice=recipe.nice,
        )
    # Move into place only when every binary of the recipe exists, so an
    # interrupted build is never mistaken for a finished one.
    for binary in recipe.packages.values():
        os.replace(staging / binary, target / binary)
    shutil.rmtree(staging, ignore_errors=True)
    _log(f"{recipe.name}: built in {time.monotonic() - started:.0f}s")


@holding_cache_lock
def ensure_binaries() -> Path:
    """Build whatever is missing and return the directory holding every binary."""
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is required to build the local control plane")
    target = bin_dir()
    target.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for recipe in recipes():
        build_recipe(recipe, target)
    _log(f"all binaries ready in {target} ({time.monotonic() - started:.0f}s)")
    return target


@holding_cache_lock
def ensure_node_binaries() -> Path:
    """Build the control plane's binaries and the real node's (kubelet), and return their
    directory."""
    target = ensure_binaries()
    for recipe in node_recipes():
        build_recipe(recipe, target)
    return target
