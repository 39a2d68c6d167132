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

        assert frozen > 10_000
        # A frozen object leaves the permanent generation only when it is freed (another
        # thread of the test process may free a few), never to be walked again: the count
        # can only fall from what heap_freeze returned.
        assert 0 < gc.get_freeze_count() <= frozen
        # The URLconf's views are loaded before the freeze, not by the first request.
        assert "broker.api.views.transactions" in sys.modules
        assert "console.views.transactions" in sys.modules
        tracked = len(gc.get_objects())
        assert tracked < frozen  # a full collection walks what is left, not the application
    finally:
        gc.unfreeze()
