"""The data pipeline's models in the Django admin: view-only, and a reconciliation run's page
shows its first anomalies and analytics rows inline."""

from __future__ import annotations

import pytest
from django.contrib.admin import site

from broker.admin import base as admin_base
from broker.models import (
    ArchiveSegment,
    ArchiveWatermark,
    DeliveryEvent,
    ReconciliationAnalytics,
    ReconciliationAnomaly,
    ReconciliationRun,
)
from tests.services.reconciliation_runs import T0, analytics_row, anomaly, stored_run

pytestmark = pytest.mark.django_db

PIPELINE_MODELS = (
    DeliveryEvent,
    ArchiveWatermark,
    ArchiveSegment,
    ReconciliationRun,
    ReconciliationAnomaly,
    ReconciliationAnalytics,
)


def test_the_pipeline_models_are_view_only(rf, admin_user):
    request = rf.get("/admin/")
    request.user = admin_user
    for model in PIPELINE_MODELS:
        model_admin = site._registry[model]
        assert model_admin.has_view_permission(request), model
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model


def test_a_run_page_shows_its_first_anomalies_and_its_analytics(admin_client, monkeypatch):
    monkeypatch.setattr(admin_base, "INLINE_ROWS", 2)
    run = stored_run(
        anomalies=[anomaly("hanging", f"TX-{i}", check_times=15) for i in range(3)],
        analytics=[analytics_row("G", "TranTest", T0, committed=4, p99=250)],
    )

    assert admin_client.get("/admin/broker/reconciliationrun/").status_code == 200
    page = admin_client.get(f"/admin/broker/reconciliationrun/{run.pk}/change/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "TX-0" in html and "TX-1" in html and "TX-2" not in html
    assert "250" in html and "Resolution p99 ms" in html
    for model in ("deliveryevent", "archivesegment", "archivewatermark", "reconciliationanomaly"):
        assert admin_client.get(f"/admin/broker/{model}/").status_code == 200
