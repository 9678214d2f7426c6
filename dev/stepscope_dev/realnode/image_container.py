"""A node image as built, run on the host without a node: a buildah working container with
chroot isolation and the host's network. The images' own tests use it
(tests/integration/chart/test_image_entrypoints.py) to check what the node runs — the image's
user, environment, entrypoint and files — in seconds, where a pod needs the node."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stepscope_dev.realnode.images import buildah


def _buildah(*args: str) -> str:
    result = subprocess.run(
        buildah(*args), capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


@dataclass(frozen=True)
class ImageContainer:
    reference: str
    name: str
    config: dict

    @property
    def entrypoint(self) -> list[str]:
        return list(self.config.get("Entrypoint") or [])

    @property
    def user(self) -> str:
        return self.config.get("User", "")

    def command(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        volumes: dict[Path, str] | None = None,
    ) -> list[str]:
        """The host command that runs ``argv`` in the image (``volumes``: host path -> path in
        the image)."""
        options = ["--isolation", "chroot", "--network", "host"]
        for key, value in (env or {}).items():
            options += ["--env", f"{key}={value}"]
        for host, inside in (volumes or {}).items():
            options += ["--volume", f"{host}:{inside}"]
        return buildah("run", *options, self.name, "--", *argv)

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """The image's entrypoint with ``args``."""
        return subprocess.run(
            self.command([*self.entrypoint, *args], env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def python(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """``python -c code`` as the image's user, on the image's PATH."""
        return subprocess.run(
            self.command(["python", "-c", code]),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def rootfs(self) -> Path:
        """The container's files, mounted on the host."""
        return Path(_buildah("mount", self.name).strip())


@contextmanager
def image_container(reference: str) -> Iterator[ImageContainer]:
    """A working container of the built image ``reference``, removed on exit."""
    name = f"stepscope-check-{secrets.token_hex(4)}"
    _buildah("from", "--pull-never", "--name", name, reference)
    try:
        inspected = json.loads(_buildah("inspect", "--type", "image", reference))
        yield ImageContainer(reference, name, inspected["OCIv1"]["config"])
    finally:
        subprocess.run(buildah("rm", name), capture_output=True, timeout=120, check=False)
