"""The node's image archives in the cache: each change to the code makes a new one, and only the
newest few of each image are kept; so are the images in buildah's store."""

from __future__ import annotations

import os

from stepscope_dev.realnode.images import image_names, prune_archives, stale_images


def _archive(directory, name: str, written: int):
    path = directory / name
    path.write_bytes(b"x")
    os.utime(path, (written, written))
    return path


def test_only_the_newest_archives_of_the_same_image_are_kept(tmp_path):
    old = _archive(tmp_path, "operator-aaaaaaaaaaaa.tar", 100)
    previous = _archive(tmp_path, "operator-bbbbbbbbbbbb.tar", 200)
    older = _archive(tmp_path, "operator-cccccccccccc.tar", 50)
    newest = _archive(tmp_path, "operator-dddddddddddd.tar", 300)
    agent = _archive(tmp_path, "agent-aaaaaaaaaaaa.tar", 10)
    rootfs = _archive(tmp_path, "rootfs-aaaaaaaaaaaa.tar", 10)
    partial = _archive(tmp_path, "rootfs-bbbbbbbbbbbb.partial.tar", 10)

    removed = prune_archives(newest)

    assert sorted(removed) == sorted([old, older])
    assert newest.exists() and previous.exists()
    # Other images' archives, and a rootfs being written, are not this image's to remove.
    assert agent.exists() and rootfs.exists() and partial.exists()


def test_the_archive_just_written_is_kept_even_with_an_older_clock(tmp_path):
    later = _archive(tmp_path, "agent-bbbbbbbbbbbb.tar", 500)
    newest = _archive(tmp_path, "agent-aaaaaaaaaaaa.tar", 100)
    assert prune_archives(newest, kept=1) == [later]
    assert newest.exists()


def test_an_image_is_kept_in_the_store_while_its_archive_is(tmp_path):
    kept = _archive(tmp_path, "agent-bbbbbbbbbbbb.tar", 200)
    newest = _archive(tmp_path, "agent-cccccccccccc.tar", 300)
    _archive(tmp_path, "operator-aaaaaaaaaaaa.tar", 100)
    names = [
        "localhost/stepscope-agent:dev-aaaaaaaaaaaa",  # its archive was pruned
        "localhost/stepscope-agent:dev-bbbbbbbbbbbb",
        "localhost/stepscope-agent:dev-cccccccccccc",
        "localhost/stepscope-agent:dev-dddddddddddd",  # its archive was pruned
        "localhost/stepscope-operator:dev-eeeeeeeeeeee",  # another image's
        "localhost/stepscope-agent:latest",  # not a tag this build makes
        "localhost/stepscope/base:bookworm-aaaaaaaaaaaa",
    ]
    stale = stale_images(names, "localhost/stepscope-agent:dev-cccccccccccc", newest)
    assert stale == [
        "localhost/stepscope-agent:dev-aaaaaaaaaaaa",
        "localhost/stepscope-agent:dev-dddddddddddd",
    ]
    assert kept.exists()


def test_a_base_image_whose_tag_carries_more_than_its_digest(tmp_path):
    newest = _archive(tmp_path, "base-bbbbbbbbbbbb.tar", 300)
    names = [
        "localhost/stepscope/base:bookworm-aaaaaaaaaaaa",
        "localhost/stepscope/base:bookworm-bbbbbbbbbbbb",
    ]
    assert stale_images(names, "localhost/stepscope/base:bookworm-bbbbbbbbbbbb", newest) == [
        "localhost/stepscope/base:bookworm-aaaaaaaaaaaa"
    ]


def test_the_store_listing_names_every_named_image_and_skips_the_unnamed():
    listing = (
        '[{"id": "a", "names": ["localhost/stepscope-agent:dev-aaaaaaaaaaaa"]},'
        ' {"id": "b", "names": null}, {"id": "c"},'
        ' {"id": "d", "names": ["x:1", "x:2"]}]'
    )
    assert image_names(listing) == ["localhost/stepscope-agent:dev-aaaaaaaaaaaa", "x:1", "x:2"]
    assert image_names("") == []
