"""Two ranks of one pod publish at once: one removing the capture's folder while the other
makes its work folder inside it must not leave the second rank "uploading" for ever."""

from __future__ import annotations

from pathlib import Path

import pytest
from stepscope_agent import publishing


def test_the_work_folder_is_made_again_when_its_parent_vanishes(tmp_path, monkeypatch):
    work_dir = tmp_path / "capture-1" / "rank-3.work"
    real_mkdir = Path.mkdir
    vanished = []

    def racing_mkdir(self, *args, **kwargs):
        # The first try loses the race: the other rank removed the parent just now.
        if self == work_dir and not vanished:
            vanished.append(True)
            raise FileNotFoundError(f"{self.parent} was removed")
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", racing_mkdir)
    publishing._make_work_dir(work_dir)
    assert vanished and work_dir.is_dir()


def test_a_folder_that_cannot_be_made_is_an_error_not_a_hang(tmp_path, monkeypatch):
    def always_gone(self, *args, **kwargs):
        raise FileNotFoundError("gone")

    monkeypatch.setattr(Path, "mkdir", always_gone)
    with pytest.raises(FileNotFoundError):
        publishing._make_work_dir(tmp_path / "c" / "rank-0.work")
