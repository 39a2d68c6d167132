"""The console's URLs under ``/console/`` (namespace ``console``); each area's routes live in
its view module. Their path parameters are typed here (``broker.converters.typed_routes``:
names, transaction ids, action slugs), so a value that cannot name anything is the console's
404 page before any view or query runs."""

from __future__ import annotations

from broker.converters import typed_routes
from console.views import (
    actions,
    alerts,
    audit,
    auth,
    blocked_message_groups,
    consumer_groups,
    exports,
    messages,
    overview,
    reconciliation,
    scheduled,
    topology,
    transactions,
)

app_name = "console"

urlpatterns = typed_routes(
    [
        *auth.urlpatterns,
        *overview.urlpatterns,
        *transactions.urlpatterns,
        *messages.urlpatterns,
        *scheduled.urlpatterns,
        *exports.urlpatterns,
        *actions.urlpatterns,
        *audit.urlpatterns,
        *topology.urlpatterns,
        *consumer_groups.urlpatterns,  # after topology's consumer-groups/new/
        *blocked_message_groups.urlpatterns,
        *reconciliation.urlpatterns,
        *alerts.urlpatterns,
    ]
)
