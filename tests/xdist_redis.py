"""pytest plugin for pytest-xdist's workers (bin/test: ``-p tests.xdist_redis``): worker
``gw<n>`` gets the n-th Redis database of ``HALFMOON_TEST_REDIS_DBS`` (space-separated) in
``REDIS_URL``, set at import, before pytest-django reads the settings, so no two workers share
wake-ups, rate counters or flushed keys (their test databases already differ: pytest-django
suffixes them ``_gw<n>``). Nothing outside a worker or without the variable."""

from __future__ import annotations

import os

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
_dbs = os.environ.get("HALFMOON_TEST_REDIS_DBS", "").split()
if _worker.startswith("gw") and _dbs:
    _n = int(_worker.removeprefix("gw"))
    _base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15").rpartition("/")[0]
    os.environ["REDIS_URL"] = f"{_base}/{_dbs[_n % len(_dbs)]}"
