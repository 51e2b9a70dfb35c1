"""What the cloud benches share: counting the bytes a launch uploads."""

from __future__ import annotations

from collections import Counter


def count_uploads(store_class: type) -> Counter:
    """Bytes ``store_class`` uploads from now on, by kind of key (snapshots, blobs, bundles,
    manifests, agent: the part after the prefix)."""
    counts: Counter = Counter()
    real = store_class.put_bytes

    def put_bytes(self, key: str, data: bytes) -> None:
        counts[key.split("/")[1]] += len(data)
        real(self, key, data)

    store_class.put_bytes = put_bytes
    return counts
