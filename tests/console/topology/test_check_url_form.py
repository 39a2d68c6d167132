"""The console's producer-group forms and the Django admin's refuse a check URL that breaks
the check-target rule (``broker.services.topology.writes.check_url_validate``) with an error on the
``check_url`` field, never a 500, and store nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from broker.models import ProducerGroup
from broker.services.topology.writes import producer_group_create

BAD_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/check",
    "http://224.0.0.1/check",
    "ftp://127.0.0.1/check",
    "http://8.8.8.8/check",
]


@pytest.fixture
def admin(console_client):
    return console_client("admin")


@pytest.mark.parametrize("url", BAD_URLS)
def test_console_create_and_edit_show_the_refusal_on_the_check_url_field(admin, url):
    created = admin.post(
        reverse("console:producer_group_create"), {"name": "Shop", "check_url": url}
    )
    assert created.status_code == 400
    assert "check_url refused (" in created.context["form"].errors["check_url"][0]
    assert not ProducerGroup.objects.exists()

    producer_group_create(name="P", check_url="http://127.0.0.1:9/check")
    edited = admin.post(reverse("console:producer_group_edit", args=["P"]), {"check_url": url})
    assert edited.status_code == 400
    assert "check_url refused (" in edited.context["form"].errors["check_url"][0]
    assert ProducerGroup.objects.get(name="P").check_url == "http://127.0.0.1:9/check"


@pytest.mark.parametrize("url", BAD_URLS)
def test_the_django_admin_shows_the_refusal_on_the_check_url_field(admin_client, url):
    added = admin_client.post(
        "/admin/broker/producergroup/add/", {"name": "G", "check_url": url, "_save": "Save"}
    )
    assert added.status_code == 200
    errors = added.context["adminform"].form.errors
    assert "check_url refused (" in errors["check_url"][0]
    assert not ProducerGroup.objects.exists()

    group = producer_group_create(name="H", check_url="http://127.0.0.1:9/check")
    changed = admin_client.post(
        f"/admin/broker/producergroup/{group.pk}/change/", {"check_url": url, "_save": "Save"}
    )
    assert changed.status_code == 200
    assert "check_url refused (" in changed.context["adminform"].form.errors["check_url"][0]
    assert ProducerGroup.objects.get(name="H").check_url == "http://127.0.0.1:9/check"
