"""An in-memory stand-in for the operator's `Buckets`, for unit tests of what the operator
stores, reads back and deletes: the calls `Buckets` offers, over a dict of key -> bytes."""

from __future__ import annotations

import io
from dataclasses import dataclass, field


@dataclass
class MemoryBuckets:
    bucket: str = "stepscope"
    objects: dict[str, bytes] = field(default_factory=dict)
    # Every key read, in order: a test can say what was (not) read.
    reads: list[str] = field(default_factory=list)

    def put_bytes(self, key: str, body: bytes, content_type: str = "") -> None:
        self.objects[key] = body

    def get_bytes(self, key: str) -> bytes | None:
        self.reads.append(key)
        return self.objects.get(key)

    def open_stream(self, key: str) -> io.BytesIO | None:
        self.reads.append(key)
        return io.BytesIO(self.objects[key]) if key in self.objects else None

    def list_keys(self, prefix: str) -> list[tuple[str, int]]:
        return [(k, len(v)) for k, v in sorted(self.objects.items()) if k.startswith(prefix)]

    def delete_keys(self, keys: list[str]) -> None:
        for key in keys:
            self.objects.pop(key, None)

    def delete_prefix(self, prefix: str, keep: frozenset[str] = frozenset()) -> int:
        keys = [key for key, _ in self.list_keys(prefix) if key not in keep]
        self.delete_keys(keys)
        return len(keys)
