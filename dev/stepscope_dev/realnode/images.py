"""The real node's images, made on this machine with no registry: base, pause, agent, operator,
trainer.

* The base is a Debian root filesystem from ``mmdebstrap`` (Debian's own mirror through apt,
  never an image registry) with Python, venv and CA certificates; it stands in for the
  ``python:3.11-slim-bookworm`` our Dockerfiles default to, passed as their ``PYTHON_IMAGE``
  build argument.
* The agent and operator images are built from ``agent_image/Dockerfile`` and
  ``operator/Dockerfile`` with buildah, unchanged. Their ``pip install`` reaches the package
  index through the host's network; the host's CA bundle and a pip.conf naming it are mounted
  into the build steps only (buildah volumes never enter a layer), because this machine reaches
  the index through a TLS-inspecting proxy whose CA the base image must not trust at run time.
* The trainer image is the base plus a non-root user; torch is not copied in. Trainer pods mount
  the host's virtualenv and the Python it was made with read-only at their host paths
  (``trainer_host_mounts``), so gigabytes of torch are never packed into a layer.
* The pause image holds one static Go binary (``pause_main.go``), so containerd's sandbox image
  needs no registry either.

Each image is tagged with a digest of its inputs and exported once to a docker archive in the
cache; a later start with the same inputs only imports the archive.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from stepscope_dev.build import cache_root, compile_package, holding_cache_lock

REPO_ROOT = Path(__file__).resolve().parents[3]
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
PAUSE_SOURCE = Path(__file__).with_name("pause_main.go")
TRAINER_DOCKERFILE = Path(__file__).with_name("trainer.Dockerfile")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_TIMEOUT_S = 1800
# What each Dockerfile COPYs from the repository: the inputs its tag is a digest of.
IMAGE_INPUTS = {
    "agent": ("agent_image/Dockerfile", "pyproject.toml", "README.md", "stepscope", "agent_image"),
    "operator": ("operator/Dockerfile", "pyproject.toml", "README.md", "stepscope", "operator"),
}


@dataclass(frozen=True)
class NodeImages:
    """References of the images imported into the real node's containerd."""

    pause: str
    base: str
    agent: str
    operator: str
    trainer: str


def images_dir() -> Path:
    return cache_root() / "images"


def _log(message: str) -> None:
    print(f"[stepscope dev node] {message}", file=sys.stderr, flush=True)


def _run(argv: list[str], what: str, *, cwd: Path | None = None) -> str:
    result = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise RuntimeError(f"{what} failed ({' '.join(argv[:6])} ...):\n{tail}")
    return result.stdout


def buildah(*args: str) -> list[str]:
    # A store of our own under the cache: never the machine's /var/lib/containers.
    store = images_dir() / "buildah"
    return [
        "nice",
        "-n",
        "10",
        "buildah",
        "--root",
        str(store / "root"),
        "--runroot",
        str(store / "run"),
        "--storage-driver",
        "overlay",
        *args,
    ]


def _digest_of(paths: list[Path], extra: str = "") -> str:
    """A digest of the files under ``paths`` (names and bytes), so any change re-tags."""
    digest = hashlib.sha256(extra.encode())
    for root in paths:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            digest.update(
                str(
                    path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
                ).encode()
            )
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _archive(name: str, tag: str) -> Path:
    return images_dir() / f"{name}-{tag}.tar"


# Archives of one image kept besides the newest: a run of another checkout (a clean clone
# beside the working tree) may still import the one before. Every change to the operator's or
# the agent's code makes a new ~600 MB archive, which otherwise piled up without end.
ARCHIVES_KEPT = 2


def _export(reference: str, archive: Path) -> None:
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    _run(buildah("push", reference, f"docker-archive:{partial}:{reference}"), f"export {reference}")
    partial.replace(archive)
    prune_archives(archive)
    prune_images(reference, archive)


def prune_archives(newest: Path, kept: int = ARCHIVES_KEPT) -> list[Path]:
    """Remove the archives of `newest`'s image (same name, another tag) beyond the `kept`
    most recently written, `newest` among them; returns what was removed."""
    name = newest.name.rsplit("-", 1)[0]
    siblings = [
        path
        for path in newest.parent.glob(f"{name}-*.tar")
        if path.name.rsplit("-", 1)[0] == name and not path.name.endswith(".partial.tar")
    ]
    siblings.sort(key=lambda path: (path == newest, path.stat().st_mtime), reverse=True)
    removed = siblings[kept:]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def stale_images(names: list[str], reference: str, archive: Path) -> list[str]:
    """The image names of `reference`'s repository whose archives are gone (pruned above):
    an image is kept in buildah's store while its archive is kept. Names of other
    repositories, and tags not made the way `reference`'s was, are not this image's."""
    repository, tag = reference.rsplit(":", 1)
    digest = archive.stem.rsplit("-", 1)[1]
    if not tag.endswith(digest):
        return []
    prefix, image = tag[: -len(digest)], archive.stem.rsplit("-", 1)[0]
    stale = []
    for name in names:
        their_repository, _, their_tag = name.rpartition(":")
        if their_repository != repository or not their_tag.startswith(prefix):
            continue
        their_digest = their_tag[len(prefix) :]
        if their_digest and not (archive.parent / f"{image}-{their_digest}.tar").exists():
            stale.append(name)
    return stale


def image_names(listing: str) -> list[str]:
    """Every name in `buildah images --json`'s listing (an image with none has ``null``)."""
    return [name for image in json.loads(listing or "[]") for name in image.get("names") or []]


def prune_images(reference: str, archive: Path) -> list[str]:
    """Remove from buildah's store the images of `reference`'s repository whose archives were
    pruned: each change to the agent's or operator's code built about 1.1 GB of new images, and
    the store had grown to 17 GB (a full disk fails a run). Returns what was removed."""
    listed = subprocess.run(
        buildah("images", "--json"), capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        return []
    try:
        names = image_names(listed.stdout)
    except (ValueError, TypeError, AttributeError) as error:
        _log(f"old images left in buildah's store: its listing could not be read ({error})")
        return []
    removed = []
    for name in stale_images(names, reference, archive):
        if subprocess.run(buildah("rmi", name), capture_output=True, check=False).returncode == 0:
            removed.append(name)
    return removed


def _has_image(reference: str) -> bool:
    return (
        subprocess.run(
            buildah("inspect", "--type", "image", reference), capture_output=True, check=False
        ).returncode
        == 0
    )


def _base_tag() -> str:
    return _digest_of([], extra=f"{DEBIAN_SUITE} {' '.join(BASE_PACKAGES)}")


def base_reference() -> str:
    """The base image's reference (what ``build_base`` builds), without building it: the
    training operator names it for the workers' init container before any pod exists."""
    return f"localhost/stepscope/base:{DEBIAN_SUITE}-{_base_tag()}"


def build_base() -> tuple[str, Path]:
    """The mmdebstrap base image: its reference in the buildah store and its archive."""
    tag = _base_tag()
    reference = base_reference()
    archive = _archive("base", tag)
    if archive.exists() and _has_image(reference):
        return reference, archive
    images_dir().mkdir(parents=True, exist_ok=True)
    rootfs = images_dir() / f"rootfs-{tag}.tar"
    if not rootfs.exists():
        started = time.monotonic()
        _log(f"making the base root filesystem with mmdebstrap ({DEBIAN_SUITE})")
        partial = rootfs.with_name(rootfs.name + ".partial.tar")
        _run(
            [
                "nice",
                "-n",
                "10",
                "mmdebstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                DEBIAN_SUITE,
                str(partial),
            ],
            "mmdebstrap",
        )
        partial.replace(rootfs)
        _log(f"base root filesystem made in {time.monotonic() - started:.0f}s")
    container = _run(buildah("from", "scratch"), "buildah from scratch").strip()
    try:
        _run(buildah("add", container, str(rootfs), "/"), "buildah add rootfs")
        _run(buildah("config", "--cmd", "/bin/bash", container), "buildah config")
        _run(buildah("commit", "--quiet", container, reference), "buildah commit base")
    finally:
        subprocess.run(buildah("rm", container), capture_output=True, check=False)
    _export(reference, archive)
    return reference, archive


def build_pause() -> tuple[str, Path]:
    """A scratch image holding the static pause binary."""
    tag = _digest_of([PAUSE_SOURCE])
    reference = f"localhost/stepscope/pause:{tag}"
    archive = _archive("pause", tag)
    if archive.exists():
        return reference, archive
    src = cache_root() / "src" / "pause"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text("module stepscope.local/build/pause\n\ngo 1.26\n")
    shutil.copyfile(PAUSE_SOURCE, src / "main.go")
    compile_package(src, ".", src / "pause", label="pause")
    container = _run(buildah("from", "scratch"), "buildah from scratch").strip()
    try:
        _run(
            buildah("copy", "--chmod", "0755", container, str(src / "pause"), "/pause"),
            "copy pause",
        )
        _run(
            buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container),
            "config pause",
        )
        _run(buildah("commit", "--quiet", container, reference), "buildah commit pause")
    finally:
        subprocess.run(buildah("rm", container), capture_output=True, check=False)
    _export(reference, archive)
    return reference, archive


def _build_context_mounts() -> list[str]:
    """Build-step-only mounts that let pip in the build reach the index as this host does."""
    if not HOST_CA_BUNDLE.exists():
        return []
    pip_conf = images_dir() / "build-pip.conf"
    pip_conf.write_text(f"[global]\ncert = {HOST_CA_BUNDLE}\n")
    return [
        "--volume",
        f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro",
        "--volume",
        f"{pip_conf}:/etc/pip.conf:ro",
    ]


def build_dockerfile(
    name: str, dockerfile: Path, inputs: list[Path], base: str, *, context: Path = REPO_ROOT
) -> tuple[str, Path]:
    """Build ``dockerfile`` on ``base`` (its PYTHON_IMAGE or BASE_IMAGE argument) with buildah."""
    tag = _digest_of(inputs, extra=base)
    reference = f"localhost/stepscope-{name}:dev-{tag}"
    archive = _archive(name, tag)
    if archive.exists():
        return reference, archive
    started = time.monotonic()
    _log(f"building {reference} from {dockerfile.relative_to(REPO_ROOT)} with buildah")
    _run(
        buildah(
            "bud",
            "--isolation",
            "chroot",
            "--network",
            "host",
            "--pull=never",
            "--layers",
            *_build_context_mounts(),
            "--build-arg",
            f"PYTHON_IMAGE={base}",
            "--build-arg",
            f"BASE_IMAGE={base}",
            "-f",
            str(dockerfile),
            "-t",
            reference,
            str(context),
        ),
        f"buildah bud {dockerfile.name}",
    )
    _export(reference, archive)
    _log(f"built {reference} in {time.monotonic() - started:.0f}s")
    return reference, archive


@holding_cache_lock
def build_node_images() -> tuple[NodeImages, list[Path]]:
    """Every image the real node runs, and the archives to import into its containerd."""
    pause, pause_archive = build_pause()
    base, base_archive = build_base()
    built = {
        name: build_dockerfile(
            name, REPO_ROOT / inputs[0], [REPO_ROOT / path for path in inputs], base
        )
        for name, inputs in IMAGE_INPUTS.items()
    }
    trainer = build_dockerfile("trainer", TRAINER_DOCKERFILE, [TRAINER_DOCKERFILE], base)
    images = NodeImages(
        pause=pause,
        base=base,
        agent=built["agent"][0],
        operator=built["operator"][0],
        trainer=trainer[0],
    )
    archives = [pause_archive, base_archive, *(a for _, a in built.values()), trainer[1]]
    return images, archives


def trainer_host_mounts(venv: Path) -> list[Path]:
    """The host directories a trainer pod mounts read-only at the same paths to run the host's
    torch: the virtualenv and the Python installation its interpreter links to."""
    interpreter = (venv / "bin" / "python").resolve()
    python_home = interpreter.parents[1]
    return [venv.resolve(), python_home]
