"""``halfmoon.heap.heap_freeze``: what the serving processes do once ready (halfmoon.web,
halfmoon.grpc), so that no full collection of the cyclic garbage collector walks the loaded
application while a request waits."""

from __future__ import annotations

import gc
import sys

from halfmoon.heap import heap_freeze


def test_the_loaded_application_is_frozen_and_left_out_of_full_collections():
    try:
        frozen = heap_freeze()

        assert frozen == gc.get_freeze_count() > 10_000
        # The URLconf's views are loaded before the freeze, not by the first request.
        assert "broker.api.views.transactions" in sys.modules
        assert "console.views.transactions" in sys.modules
        tracked = len(gc.get_objects())
        assert tracked < frozen  # a full collection walks what is left, not the application
    finally:
        gc.unfreeze()
