"""A process's running byte counts per key, thread-safe, that say when a key reaches a size."""

from __future__ import annotations

import threading
from collections.abc import Mapping


class SizeTrigger:
    """Bytes noted per key (an int, e.g. a half queue id) in this process; a key whose total
    reaches the threshold is reported once and starts again from 0."""

    def __init__(self) -> None:
        self._sizes: dict[int, int] = {}
        self._lock = threading.Lock()

    def add(self, sizes: Mapping[int, int], *, threshold: int) -> list[int]:
        """Add ``sizes`` (bytes per key); return the keys that reached ``threshold`` bytes,
        each reset to 0."""
        full: list[int] = []
        with self._lock:
            for key, size in sizes.items():
                total = self._sizes.get(key, 0) + size
                if total >= threshold:
                    full.append(key)
                    total = 0
                self._sizes[key] = total
        return full
