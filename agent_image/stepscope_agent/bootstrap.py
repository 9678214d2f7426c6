"""Wait for the training program to import torch, then install the step hook.

``sitecustomize`` calls :func:`install` at interpreter start. It costs one environment
lookup and, when the agent directory is set, one entry on ``sys.meta_path``: no thread,
no socket and no torch import. Only when the program itself finishes importing torch does
:mod:`stepscope_agent.runtime` load and register the optimizer hook.
"""

from __future__ import annotations

import sys

from stepscope_agent import settings


class _AfterImport:
    """Runs torch's own loader, then calls back once torch is fully initialised. (Plain
    classes satisfy the import protocols; importlib.abc alone would cost more start-up time
    than the rest of the hook.)"""

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _torch_imported()

    def __getattr__(self, name: str):  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


class _TorchImportWatcher:
    """A meta-path finder that only ever answers for the top-level ``torch`` package."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        # Take ourselves off the path first: torch is imported once, and other finders
        # must not see us again when we ask them below.
        _remove_watcher()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _AfterImport(spec.loader)
                return spec
        return None


_watcher = _TorchImportWatcher()


def _remove_watcher() -> None:
    if _watcher in sys.meta_path:
        sys.meta_path.remove(_watcher)


def _torch_imported() -> None:
    # A failure to set up profiling must never break the program's own import of torch.
    try:
        from stepscope_agent import runtime

        runtime.activate()
    except Exception as error:  # noqa: BLE001 - anything here would be our bug, not theirs
        print(f"stepscope: hook disabled, could not start: {error!r}", file=sys.stderr)


def install() -> None:
    """Arm the torch import watcher if the sidecar gave this process an agent directory."""
    if settings.agent_dir() is None:
        return
    settings.enable_flight_recorder()
    if "torch" in sys.modules:
        _torch_imported()
    elif _watcher not in sys.meta_path:
        sys.meta_path.insert(0, _watcher)
