"""The serving processes' heap and Python's cyclic garbage collector.

A full collection (generation 2) walks every tracked object of the process: in a web process,
every object of Django, DRF, the views and the URLconf once they are loaded (figures in
bench/README.md). The collector runs one whenever enough objects have survived two younger
collections, which a busy process reaches every few seconds, so a request that happened to
trigger it waited that long: the outliers of a long poll's commit-to-receive latency and of
``/healthz`` (bench/visibility.py). Objects alive once the process is ready live as long as it
does; ``gc.freeze`` moves them to a generation the collector never walks (Python's documented
use: after start-up, before serving), and a full collection then walks only what requests have
left behind.
"""

from __future__ import annotations

import gc


def heap_freeze() -> int:
    """Load what the first request would load (the URLconf and every view it names), collect
    once, and freeze every object alive into the collector's permanent generation
    (``gc.freeze``). Call once, in a serving process ready to serve. Returns how many objects
    were frozen (``gc.get_freeze_count``)."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports the URLconf and its views' modules
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
