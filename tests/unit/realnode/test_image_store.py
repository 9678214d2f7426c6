"""A node's containerd root made from the cached one: every file shared by hard link but the
two databases a running containerd writes in place, which are the node's own copies, so
nothing a node does reaches the cache; an import-only containerd has no CRI plugin."""

from __future__ import annotations

import tomllib
from pathlib import Path

from stepscope_dev.realnode import containerd
from stepscope_dev.realnode.image_store import WRITTEN_IN_PLACE, link_root, store_key

BLOB = Path("io.containerd.content.v1.content/blobs/sha256/ab12")
LAYER_FILE = Path("io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/usr/lib/libc.so")


def _template(tmp_path: Path) -> Path:
    template = tmp_path / "store" / "root"
    for relative in (BLOB, LAYER_FILE, *WRITTEN_IN_PLACE):
        (template / relative).parent.mkdir(parents=True, exist_ok=True)
        (template / relative).write_bytes(f"cached {relative}".encode())
    return template


def test_a_nodes_root_shares_the_images_and_copies_the_databases(tmp_path):
    template = _template(tmp_path)
    root = tmp_path / "node" / "containerd" / "root"
    root.parent.mkdir(parents=True)

    assert link_root(template, root) is True

    for shared in (BLOB, LAYER_FILE):
        assert (root / shared).stat().st_ino == (template / shared).stat().st_ino
    for written in WRITTEN_IN_PLACE:
        assert (root / written).stat().st_ino != (template / written).stat().st_ino
        (root / written).write_bytes(b"the node's own metadata")
        assert (template / written).read_bytes() == f"cached {written}".encode()
    # containerd unlinks what it collects: the cache keeps it.
    (root / BLOB).unlink()
    assert (template / BLOB).read_bytes() == f"cached {BLOB}".encode()


def test_the_store_is_keyed_by_the_archives_names_whatever_their_order():
    first = [Path("/c/agent-1.tar"), Path("/c/pause-2.tar")]
    assert store_key(first) == store_key(list(reversed(first)))
    assert store_key(first) != store_key([Path("/c/agent-3.tar"), Path("/c/pause-2.tar")])


def test_an_import_only_containerd_has_no_cri_plugin(tmp_path):
    paths = containerd.ContainerdPaths(tmp_path / "store")
    containerd.write_config(paths, "localhost/stepscope/pause:x", cni_bin_dir=None)
    config = tomllib.loads(paths.config.read_text())
    assert "io.containerd.grpc.v1.cri" in config["disabled_plugins"]
    assert "io.containerd.grpc.v1.cri" not in config.get("plugins", {})
    assert config["root"] == str(paths.root)
