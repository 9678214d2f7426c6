"""The node's images unpacked once into a containerd root kept in the cache, and each node's
containerd root made from that one by hard links.

Importing the archives (about 1.5 GB: pause, base, agent, operator, trainer) into a fresh
containerd took 35 of the 80 seconds a node needs to start on this project's 2-core machine,
and ``make test`` starts a node for every module that asks for one. What an import leaves is
safe to share by hard link: content blobs and committed (unpacked) snapshots are never written
again once made; containerd only adds new ones and unlinks old ones, and an overlay mount copies
a lower file up before it changes it. The two bolt databases (containerd's metadata and the
overlayfs snapshotter's) are written by every node, so each node gets copies of them.

The store is keyed by the archives' names, which carry their builds' content hashes, so a new
image makes a new store; older stores are removed when a new one is made. Where hard links
cannot be made (the cache on another filesystem than the node), the node imports the archives
itself, as it would without a store, and says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from stepscope_dev.build import holding_cache_lock
from stepscope_dev.processes import stop_pid
from stepscope_dev.realnode import containerd

# The files a running containerd writes in place, relative to its root: copied, never linked.
WRITTEN_IN_PLACE = (
    Path("io.containerd.metadata.v1.bolt/meta.db"),
    Path("io.containerd.snapshotter.v1.overlayfs/metadata.db"),
)
_DONE = "imported"


def stores_dir(images_dir: Path) -> Path:
    return images_dir / "containerd-roots"


def store_key(archives: list[Path]) -> str:
    """The store of exactly these archives (their names carry their content hashes)."""
    return hashlib.sha256("\n".join(sorted(a.name for a in archives)).encode()).hexdigest()[:16]


@holding_cache_lock
def prepared_root(images_dir: Path, archives: list[Path], sandbox_image: str) -> Path:
    """The containerd root holding ``archives`` imported and unpacked; made on first use, by a
    containerd of its own that runs only for the import."""
    stores = stores_dir(images_dir)
    store = stores / store_key(archives)
    if (store / _DONE).exists():
        return store / "root"
    staging = stores / f"{store.name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    paths = containerd.ContainerdPaths(staging)
    containerd.write_config(paths, sandbox_image, cni_bin_dir=None)
    log = staging / "containerd.log"
    pid = containerd.start_containerd(paths, log, die_with_parent=True)
    try:
        containerd.wait_containerd(paths, pid, log)
        started = time.monotonic()
        containerd.import_archives(paths, archives)
        print(
            f"[stepscope dev node] images imported into the cached containerd root in "
            f"{time.monotonic() - started:.0f}s",
            flush=True,
        )
    finally:
        stop_pid(pid)
    for old in stores.iterdir():
        if old.name not in (store.name, staging.name):
            shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)
    (staging / "containerd" / "root").rename(staging / "root")
    shutil.rmtree(staging / "containerd", ignore_errors=True)
    (staging / _DONE).write_text("\n".join(a.name for a in archives) + "\n")
    staging.rename(store)
    return store / "root"


def link_root(template: Path, root: Path) -> bool:
    """Make ``root`` (which must not exist) a copy of ``template`` that shares every file but
    the databases by hard link; False, leaving no ``root``, where links cannot be made."""
    if os.stat(template).st_dev != os.stat(root.parent).st_dev:
        return False
    result = subprocess.run(
        ["cp", "-a", "--link", str(template), str(root)],
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"linking the cached containerd root failed: {result.stderr.strip()}")
    for written in WRITTEN_IN_PLACE:
        if (root / written).exists():
            (root / written).unlink()
            shutil.copy2(template / written, root / written)
    return True
