"""Whether this process reaches its database, as two of ``/metrics``' series kept in the process
(prometheus_client's own ``Gauge`` and ``Counter``, not read from the database, so they are
there while it is away).

- ``halfmoon_database_up``: 1 when this process's last attempt to read the database for
  ``/metrics`` succeeded, 0 when it failed (set by ``broker.metrics.BrokerCollector`` on each
  scrape, before the gauge is read).
- ``halfmoon_database_unavailable_responses_total``: requests this process answered 503
  because the database was unreachable (``broker.api.exceptions.database_unavailable``, the API's
  JSON 503 and the console's HTML one).

Both are per process: a web server of several processes answers each scrape from whichever
process the kernel handed the connection to (``SO_REUSEPORT``), so the counter may go back
between scrapes, which Prometheus's ``rate()`` and ``increase()`` read as a restart of the
counter. Unregistered here; ``broker.metrics`` puts them on its ``REGISTRY``.
"""

from __future__ import annotations

from django.db import InterfaceError, OperationalError
from prometheus_client import Counter, Gauge, disable_created_metrics

DATABASE_UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)
"""What Django raises when the database is unreachable: connection refused, the pool's timeout,
a connection lost mid-request."""

# No halfmoon_database_unavailable_responses_created beside the counter: the broker's other
# counters are read from the database and have none either.
disable_created_metrics()

DATABASE_UP = Gauge(
    "halfmoon_database_up",
    "1 when this process's last attempt to read the database (this scrape's) succeeded, 0 while "
    "the database does not answer",
    registry=None,
)
DATABASE_UNAVAILABLE_RESPONSES = Counter(
    "halfmoon_database_unavailable_responses",
    "Requests this process answered 503 because the database did not answer (API and console)",
    registry=None,
)
