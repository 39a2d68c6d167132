"""A producer group's ``check_url`` is refused with 400 ``check_url_not_allowed`` when it
breaks the check-target rule (api-v1 "Topics and groups"), on create and on
PATCH, and nothing is stored."""

from __future__ import annotations

import pytest

from broker.models import ProducerGroup
from tests.api_helpers import assert_error, post

REFUSED = [
    ("http://169.254.169.254/latest/meta-data/", "link_local"),
    ("http://[fe80::1]:9000/check", "link_local"),
    ("http://224.0.0.1:9000/check", "multicast"),
    ("ftp://127.0.0.1:9000/check", "scheme"),
    ("http://8.8.8.8:9000/check", "not_allowed"),  # outside the default networks
    ("http://127.0.0.1:8000/api/v1/topics", "broker_itself"),  # HALFMOON_HOST:HALFMOON_PORT
]


def assert_refused(response, url: str, rule: str) -> None:
    error = assert_error(response, 400, "check_url_not_allowed")
    assert error["details"] == {"field": "check_url", "check_url": url, "rule": rule}
    assert error["message"].startswith(f"check_url refused ({rule}): ")


@pytest.mark.parametrize(("url", "rule"), REFUSED)
def test_a_refused_check_url_is_a_400_on_create_and_nothing_is_stored(owner, url, rule):
    response = post(owner, "/api/v1/producer-groups", {"name": "G", "check_url": url})

    assert_refused(response, url, rule)
    assert not ProducerGroup.objects.filter(name="G").exists()


@pytest.mark.parametrize(("url", "rule"), REFUSED)
def test_a_refused_check_url_is_a_400_on_patch_and_the_old_one_stays(owner, url, rule):
    created = post(
        owner, "/api/v1/producer-groups", {"name": "G", "check_url": "http://127.0.0.1:9000/check"}
    )
    assert created.status_code == 201

    response = owner.patch("/api/v1/producer-groups/G", {"check_url": url}, format="json")

    assert_refused(response, url, rule)
    assert ProducerGroup.objects.get(name="G").check_url == "http://127.0.0.1:9000/check"


def test_the_allowed_networks_are_a_setting(owner, settings):
    settings.HALFMOON_CHECK_URL_ALLOWED_NETWORKS = ["203.0.113.0/24"]

    allowed = post(
        owner, "/api/v1/producer-groups", {"name": "G", "check_url": "http://203.0.113.9/check"}
    )
    loopback = post(
        owner, "/api/v1/producer-groups", {"name": "H", "check_url": "http://127.0.0.1:9/check"}
    )

    assert allowed.status_code == 201, allowed.content
    assert_refused(loopback, "http://127.0.0.1:9/check", "not_allowed")
