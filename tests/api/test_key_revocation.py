"""A revoked access key is refused by every process within 1 s: each process
caches access keys (``broker.lookups``, ``HALFMOON_LOOKUP_CACHE_MS``, 5 s) under a generation
that every committed change rewrites in Redis. With Redis away a process still authenticates,
says so in its log, and sees revocations when its cached key expires.

The cross-process tests start other Python processes on the test database that authenticate a
token in a loop through ``AccessKeyAuthentication`` and report when it is first refused."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from broker import lookups
from broker.lookups import access_key_by_hash
from broker.models import AccessKey
from broker.services.topology.writes import access_key_create, access_key_update, token_hash
from tests.conftest import client_for
from tests.e2e.processes import database_url

ROOT = Path(__file__).resolve().parents[2]

AUTHENTICATE_IN_A_LOOP = """
import sys, time
import django
django.setup()
from django.test import RequestFactory
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from broker.api.authentication import AccessKeyAuthentication

token, seconds = sys.argv[1], float(sys.argv[2])
authentication = AccessKeyAuthentication()
factory = RequestFactory()
announced = False
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    request = Request(factory.get("/api/v1/transactions", HTTP_AUTHORIZATION=f"Bearer {token}"))
    try:
        authentication.authenticate(request)
    except AuthenticationFailed:
        print(f"refused {time.time()}", flush=True)
        sys.exit(0)
    if not announced:
        print(f"accepted {time.time()}", flush=True)  # the key is now in this process's cache
        announced = True
    time.sleep(0.01)
print("never refused", flush=True)
"""


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def authenticating_process(token: str, **env: str) -> subprocess.Popen[str]:
    """Another process of the broker (production settings, the test database and Redis) that
    authenticates ``token`` every 10 ms for up to 30 s; prints ``accepted <time>`` once, then
    ``refused <time>`` (``time.time()``) when the key is first refused, and exits."""
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "halfmoon.settings",
        "DATABASE_URL": database_url(connection.settings_dict["NAME"]),
        "REDIS_URL": django_settings.REDIS_URL,
        "HALFMOON_DB_POOL": "0",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-c", AUTHENTICATE_IN_A_LOOP, token, "30"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_accepted(process: subprocess.Popen[str]) -> None:
    line = process.stdout.readline()
    assert line.startswith("accepted "), line + process.stderr.read()


def refused_at(process: subprocess.Popen[str]) -> tuple[float, str]:
    """When ``process`` first refused the key (``time.time()``), and its log."""
    out, err = process.communicate(timeout=60)
    assert out.startswith("refused "), out + err
    return float(out.split()[1]), err


@pytest.mark.django_db(transaction=True)
def test_a_revoked_key_is_refused_by_every_other_process_within_a_second():
    key, token = access_key_create(name="app", producer_groups=["G"])
    others = [authenticating_process(token) for _ in range(2)]
    try:
        for process in others:
            wait_accepted(process)

        revoked = time.time()
        key.delete()  # how /admin/ revokes a key

        latencies = [refused_at(process)[0] - revoked for process in others]
    finally:
        for process in others:
            process.kill()
            process.wait()
    assert all(latency < 1.0 for latency in latencies), latencies


@pytest.mark.django_db(transaction=True)
def test_with_redis_away_a_process_sees_the_revocation_when_its_cache_expires():
    key, token = access_key_create(name="app", producer_groups=["G"])
    other = authenticating_process(
        token,
        REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0",
        HALFMOON_LOOKUP_CACHE_MS="2000",
    )
    try:
        wait_accepted(other)  # it authenticates without Redis

        revoked = time.time()
        key.delete()

        refused, log = refused_at(other)
    finally:
        other.kill()
        other.wait()
    assert refused - revoked < 2.0 + 1.0  # its cache time, with some slack for a loaded machine
    assert "Redis does not answer" in log
    assert "HALFMOON_LOOKUP_CACHE_MS=2000" in log


@pytest.mark.django_db
def test_a_committed_change_writes_a_new_generation_to_redis(django_capture_on_commit_callbacks):
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    before = client.get(lookups.ACCESS_KEY_GENERATION_KEY)

    with django_capture_on_commit_callbacks(execute=True):
        key, _ = access_key_create(name="app")
    created = client.get(lookups.ACCESS_KEY_GENERATION_KEY)
    with django_capture_on_commit_callbacks(execute=True):
        key.delete()
    deleted = client.get(lookups.ACCESS_KEY_GENERATION_KEY)

    assert len({before, created, deleted}) == 3
    assert deleted is not None and len(deleted) == 32


@pytest.mark.django_db
def test_this_process_refuses_a_revoked_key_at_once(django_capture_on_commit_callbacks):
    key, token = access_key_create(name="app", producer_groups=["G"])
    api = client_for(token)
    assert api.get("/api/v1/transactions").status_code == 200  # the key is cached

    with django_capture_on_commit_callbacks(execute=True):
        key.delete()

    response = api.get("/api/v1/transactions")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "The access key is unknown or was revoked."


@pytest.mark.django_db
def test_a_new_generation_in_redis_drops_this_process_cached_keys():
    """What another process's change does here: a key cached under the old generation is read
    again, within ACCESS_KEY_GENERATION_CHECK_S."""
    key, token = access_key_create(name="app", producer_groups=["G"])
    assert access_key_by_hash(token_hash(token)).producer_groups == ["G"]  # cached
    AccessKey.objects.filter(pk=key.pk).update(producer_groups=["H"])  # no signal: as elsewhere
    assert access_key_by_hash(token_hash(token)).producer_groups == ["G"]  # still cached

    redis.Redis.from_url(django_settings.REDIS_URL).set(
        lookups.ACCESS_KEY_GENERATION_KEY,
        uuid.uuid4().hex,  # never the one cached under
    )
    time.sleep(lookups.ACCESS_KEY_GENERATION_CHECK_S + 0.05)

    assert access_key_by_hash(token_hash(token)).producer_groups == ["H"]


@pytest.mark.django_db
def test_with_redis_away_keys_still_authenticate_and_the_log_says_why(
    settings, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    real_redis_url = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    generation = lookups._AccessKeyGeneration()
    monkeypatch.setattr(lookups, "_access_key_generation", generation)
    key, token = access_key_create(name="app", producer_groups=["G"])
    caplog.set_level(logging.INFO, logger="halfmoon.lookups")

    for _ in range(3):
        assert client_for(token).get("/api/v1/transactions").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        access_key_update(name="app", is_admin=True, producer_groups=[], consumer_groups=[])
    assert access_key_by_hash(token_hash(token)).is_admin  # this process forgot it at once

    messages = [r.getMessage() for r in caplog.records if r.name == "halfmoon.lookups"]
    assert sum(m.startswith("Redis does not answer") for m in messages) == 1  # once per outage
    assert any("an access key changed but Redis does not answer" in m for m in messages)

    # Redis is back: the next read, a retry interval later, says so and follows it again
    settings.REDIS_URL = real_redis_url
    generation._client = None
    time.sleep(lookups.ACCESS_KEY_GENERATION_RETRY_S + 0.05)
    access_key_by_hash(token_hash(token))
    assert "Redis answers again" in caplog.records[-1].getMessage()
