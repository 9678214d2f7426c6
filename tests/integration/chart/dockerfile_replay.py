"""Replay a Dockerfile's COPY and RUN steps on this machine, without a Docker engine.

Every absolute path the Dockerfile names is moved under a scratch root, each stage's WORKDIR
becomes a directory there, COPY copies from the repository (COPY --from copies between the
replayed stages, which share the root), and RUN runs in bash with the same path mapping. The
base image is this machine's Python, so the replay checks the Dockerfile's own steps and the
entrypoint they produce, not the base image.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ReplayedImage:
    root: Path
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def run(
        self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        command = [self._resolve(self.entrypoint[0]), *self.entrypoint[1:], *args]
        return subprocess.run(
            command,
            env={**self.env, **(extra_env or {})},
            text=True,
            capture_output=True,
            timeout=timeout,
            check=False,
        )

    def python(self, code: str, extra_env: dict[str, str] | None = None):
        return subprocess.run(
            [self._resolve("python"), "-c", code],
            env={**self.env, **(extra_env or {})},
            text=True,
            capture_output=True,
            timeout=120,
            check=False,
        )

    def _resolve(self, name: str) -> str:
        found = shutil.which(name, path=self.env["PATH"])
        assert found, f"{name} not found on the image's PATH {self.env['PATH']}"
        return found


def _joined_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    instructions, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        current += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            keyword, _, rest = current.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
            current = ""
    return instructions


def replay(dockerfile: Path, context: Path, root: Path) -> ReplayedImage:
    image = ReplayedImage(root=root)
    workdir = "/"
    # The base image's `python`: this test run's interpreter (the images' Python, 3.11).
    base_bin = root / ".base-image-bin"
    base_bin.mkdir(parents=True, exist_ok=True)
    (base_bin / "python").symlink_to(sys.executable)
    base_path = f"{base_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env: dict[str, str] = {"PATH": base_path, "HOME": str(root)}

    def mapped(text: str) -> str:
        # Absolute image paths (not URLs, not flags) move under the scratch root.
        return re.sub(r"(?<![\w:.])(/(?:opt|src|var|etc|app)\b)", lambda m: str(root) + m[1], text)

    for keyword, rest in _joined_instructions(dockerfile.read_text()):
        if keyword == "FROM":
            workdir = "/"
            env = {"PATH": base_path, "HOME": str(root)}
        elif keyword == "ENV":
            for assignment in shlex.split(rest):
                name, _, value = assignment.partition("=")
                value = value.replace("$PATH", env.get("PATH", ""))
                env[name] = mapped(value)
        elif keyword == "WORKDIR":
            workdir = rest
            image.path(workdir).mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            parts = shlex.split(rest)
            from_stage = parts[0].startswith("--from=")
            if from_stage:
                parts = parts[1:]
            *sources, dest = parts
            target = image.path(dest if dest.startswith("/") else f"{workdir}/{dest}")
            for source in sources:
                origin = image.path(source) if from_stage else context / source
                if from_stage and origin == target:
                    continue  # the stages share one root: already in place
                if origin.is_dir():
                    shutil.copytree(
                        origin,
                        target
                        if not dest.endswith("/") or len(sources) == 1
                        else target / origin.name,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"),
                    )
                else:
                    destination = target / origin.name if dest.endswith("/") else target
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, destination)
        elif keyword == "RUN":
            subprocess.run(
                ["bash", "-euo", "pipefail", "-c", mapped(rest)],
                cwd=image.path(workdir),
                env=env,
                check=True,
                timeout=900,
                capture_output=True,
                text=True,
            )
        elif keyword == "ENTRYPOINT":
            image.entrypoint = [str(x) for x in json.loads(rest)]
        # ARG, USER, EXPOSE: checked by tests/unit/chart/test_dockerfiles_lint.py, nothing to replay.
    image.env = env
    return image
