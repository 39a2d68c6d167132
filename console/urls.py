"""The console's URLs under ``/console/`` (namespace ``console``); each area's routes live in
its view module."""

from __future__ import annotations

from console.views import actions, audit, auth, overview, reconciliation, topology, transactions

app_name = "console"

urlpatterns = [
    *auth.urlpatterns,
    *overview.urlpatterns,
    *transactions.urlpatterns,
    *actions.urlpatterns,
    *audit.urlpatterns,
    *topology.urlpatterns,
    *reconciliation.urlpatterns,
]
