"""Access keys' RocketMQ SecretKeys and the MQv2-HMAC-SHA1 signature of gRPC calls
(broker.services.access.secrets; manage.py access_key_secret, create_access_key --secret).
Real PostgreSQL; the signatures are the ones the official Python client makes."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from rocketmq.v5.client.client_configuration import ClientConfiguration, Credentials
from rocketmq.v5.util.signature import Signature

from broker.errors import NotFound, Unauthorized
from broker.models import AccessKey
from broker.rules.secret_keys import DEVELOPMENT_SECRET_KEY
from broker.services.access.secrets import (
    access_key_secret_clear,
    access_key_secret_encryption_check,
    access_key_secret_set,
    signature_authenticate,
)
from broker.services.topology.writes import access_key_create

DATE_TIME = "20240102T030405Z"


def authorization(access_key: str, secret: str, date_time: str = DATE_TIME) -> str:
    """The authorization header rocketmq-clients' Python ``Signature`` writes."""
    return (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={Signature.sign(secret, date_time)}"
    )


def python_client_headers(access_key: str, secret: str) -> dict[str, str]:
    """The metadata of one call of the official Python client with these credentials."""
    config = ClientConfiguration("127.0.0.1:8081", Credentials(access_key, secret))
    return dict(Signature.metadata(config, "client-1"))


@pytest.fixture
def app(db) -> AccessKey:
    key, _ = access_key_create(name="orders-app", producer_groups=["G"])
    return key


@pytest.fixture
def secret(app: AccessKey) -> str:
    return access_key_secret_set(name=app.name)


def refused(authorization: str | None, date_time: str | None = DATE_TIME) -> Unauthorized:
    with pytest.raises(Unauthorized) as raised:
        signature_authenticate(authorization=authorization, date_time=date_time)
    assert raised.value.status_code == 401
    assert raised.value.code == "unauthorized"
    return raised.value


def test_a_secret_is_random_and_stored_only_encrypted(app: AccessKey) -> None:
    secret = access_key_secret_set(name=app.name)

    assert len(secret) >= 43  # 32 random bytes, URL-safe base64
    stored = AccessKey.objects.get(name=app.name)
    assert stored.secret_encrypted not in ("", secret)
    assert secret not in stored.secret_encrypted
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(k)::text FROM broker_accesskey k")
        rows = [row[0] for row in cursor.fetchall()]
    assert rows and all(secret not in row for row in rows)
    assert json.loads(rows[0])["secret_encrypted"] == stored.secret_encrypted


def test_the_python_clients_signed_call_names_its_access_key(app: AccessKey, secret: str) -> None:
    headers = python_client_headers(app.name, secret)

    key = signature_authenticate(
        authorization=headers["authorization"], date_time=headers["x-mq-date-time"]
    )

    assert key is not None and key.name == app.name and key.producer_groups == ["G"]


def test_an_upper_case_signature_as_nodes_is_accepted(app: AccessKey, secret: str) -> None:
    header = authorization(app.name, secret)
    signature = header.rsplit("=", 1)[1]
    upper = header.replace(signature, signature.upper())
    assert upper != header

    key = signature_authenticate(authorization=upper, date_time=DATE_TIME)

    assert key is not None and key.name == app.name


def test_a_signature_made_with_another_secret_is_refused(app: AccessKey, secret: str) -> None:
    error = refused(authorization(app.name, secret + "x"))

    assert error.message == "The signature does not match access key orders-app's SecretKey."
    assert error.details == {"access_key": "orders-app"}


def test_a_signature_of_another_date_time_is_refused(app: AccessKey, secret: str) -> None:
    error = refused(authorization(app.name, secret), date_time="20240102T030406Z")

    assert "does not match" in error.message


@pytest.mark.parametrize("date_time", [None, ""])
def test_a_call_without_its_date_time_is_refused(
    app: AccessKey, secret: str, date_time: str | None
) -> None:
    error = refused(authorization(app.name, secret), date_time=date_time)

    assert error.message == "The x-mq-date-time header is missing: the signature is made over it."


def test_an_unknown_access_key_is_refused(db) -> None:
    error = refused(authorization("nobody", "whatever"))

    assert error.message == "Access key nobody does not exist."
    assert error.details == {"access_key": "nobody"}


def test_a_key_without_a_secret_is_refused_saying_how_to_give_it_one(app: AccessKey) -> None:
    error = refused(authorization(app.name, ""))

    assert "has no RocketMQ SecretKey" in error.message
    assert "manage.py access_key_secret orders-app" in error.message


@pytest.mark.parametrize(
    "header",
    [
        "Bearer hm_abc",
        "MQv2-HMAC-SHA1 Credential=orders-app",
        "MQv2-HMAC-SHA1 Credential=orders-app, Signature=nothex",
        "garbage",
    ],
)
def test_a_malformed_header_is_refused_saying_why(app: AccessKey, secret: str, header) -> None:
    error = refused(header)

    assert error.message.startswith("The authorization header")


@pytest.mark.parametrize("header", [None, ""])
def test_no_authorization_is_anonymous(db, header: str | None) -> None:
    assert signature_authenticate(authorization=header, date_time=DATE_TIME) is None
    assert signature_authenticate(authorization=header, date_time=None) is None


def test_the_python_clients_empty_credentials_are_anonymous(db) -> None:
    headers = python_client_headers("", "")

    assert headers["authorization"].startswith("MQv2-HMAC-SHA1 Credential=, ")
    assert (
        signature_authenticate(
            authorization=headers["authorization"], date_time=headers["x-mq-date-time"]
        )
        is None
    )


def test_a_new_secret_replaces_the_old_one_at_once(app: AccessKey, secret: str) -> None:
    assert signature_authenticate(
        authorization=authorization(app.name, secret), date_time=DATE_TIME
    )

    new = access_key_secret_set(name=app.name)

    assert new != secret
    assert "does not match" in refused(authorization(app.name, secret)).message
    key = signature_authenticate(authorization=authorization(app.name, new), date_time=DATE_TIME)
    assert key is not None and key.name == app.name


def test_a_cleared_secret_is_refused_at_once(app: AccessKey, secret: str) -> None:
    assert signature_authenticate(
        authorization=authorization(app.name, secret), date_time=DATE_TIME
    )

    access_key_secret_clear(name=app.name)

    assert AccessKey.objects.get(name=app.name).secret_encrypted == ""
    assert "has no RocketMQ SecretKey" in refused(authorization(app.name, secret)).message


def test_a_deleted_key_is_refused_at_once(app: AccessKey, secret: str) -> None:
    assert signature_authenticate(
        authorization=authorization(app.name, secret), date_time=DATE_TIME
    )

    AccessKey.objects.filter(name=app.name).delete()

    assert (
        refused(authorization(app.name, secret)).message == "Access key orders-app does not exist."
    )


@pytest.mark.parametrize("write", [access_key_secret_set, access_key_secret_clear])
def test_an_unknown_key_has_no_secret_to_set_or_clear(db, write) -> None:
    with pytest.raises(NotFound) as raised:
        write(name="nobody")

    assert raised.value.code == "access_key_not_found"
    assert raised.value.details == {"name": "nobody"}


def test_a_changed_server_secret_key_refuses_the_secret_until_it_is_set_again(
    app: AccessKey, secret: str, settings, caplog
) -> None:
    header = authorization(app.name, secret)
    assert signature_authenticate(authorization=header, date_time=DATE_TIME)
    settings.SECRET_KEY = "another-server-secret-key"

    with caplog.at_level(logging.WARNING, logger="halfmoon.access_keys"):
        first = refused(header)
        second = refused(header)

    for error in (first, second):
        assert "cannot be read by this broker" in error.message
        assert "manage.py access_key_secret orders-app" in error.message
    warnings = [r for r in caplog.records if r.name == "halfmoon.access_keys"]
    assert len(warnings) == 1  # once, not on every call
    assert warnings[0].levelno == logging.WARNING
    assert "orders-app" in warnings[0].getMessage()
    assert secret not in caplog.text

    new = access_key_secret_set(name=app.name)
    key = signature_authenticate(authorization=authorization(app.name, new), date_time=DATE_TIME)
    assert key is not None and key.name == app.name


def test_the_secret_is_never_logged(app: AccessKey, caplog) -> None:
    with caplog.at_level(logging.DEBUG):
        secret = access_key_secret_set(name=app.name)
        signature_authenticate(authorization=authorization(app.name, secret), date_time=DATE_TIME)
        refused(authorization(app.name, secret + "x"))

    assert secret not in caplog.text


# The commands.


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def signs(name: str, secret: str) -> bool:
    key = signature_authenticate(authorization=authorization(name, secret), date_time=DATE_TIME)
    return key is not None and key.name == name


def test_access_key_secret_prints_the_new_secret_alone_on_the_last_line(app: AccessKey) -> None:
    out, err = run("access_key_secret", app.name)

    secret = out.strip().splitlines()[-1]
    assert signs(app.name, secret)
    assert "RocketMQ SecretKey of access key orders-app" in err
    assert secret not in err

    again = run("access_key_secret", app.name)[0].strip().splitlines()[-1]
    assert again != secret and signs(app.name, again)
    assert "does not match" in refused(authorization(app.name, secret)).message


def test_access_key_secret_clear(app: AccessKey, secret: str) -> None:
    out, _ = run("access_key_secret", app.name, "--clear")

    assert "has no RocketMQ SecretKey now" in out
    assert AccessKey.objects.get(name=app.name).secret_encrypted == ""


@pytest.mark.parametrize("extra", [[], ["--clear"]])
def test_access_key_secret_of_an_unknown_key_fails(db, extra: list[str]) -> None:
    with pytest.raises(CommandError, match="Access key nobody does not exist."):
        run("access_key_secret", "nobody", *extra)


def test_create_access_key_with_a_secret_keeps_the_token_alone_on_the_last_line(db) -> None:
    out, err = run("create_access_key", "app", "--producer-group", "G", "--secret")

    token = out.strip().splitlines()[-1]
    assert AccessKey.objects.get(name="app").token_prefix == token[:10]
    secret_lines = [line for line in err.splitlines() if line.startswith("RocketMQ SecretKey: ")]
    assert len(secret_lines) == 1
    secret = secret_lines[0].removeprefix("RocketMQ SecretKey: ")
    assert "AccessKey: app" in err.splitlines()
    assert secret not in out
    assert signs("app", secret)


def test_create_access_key_without_secret_makes_none(db) -> None:
    out, err = run("create_access_key", "app")

    assert AccessKey.objects.get(name="app").secret_encrypted == ""
    assert "SecretKey" not in out + err


@pytest.mark.parametrize(
    "command", [["access_key_secret", "orders-app"], ["create_access_key", "new", "--secret"]]
)
def test_the_commands_refuse_a_secret_the_servers_could_not_read(
    app: AccessKey, settings, tmp_path, command: list[str]
) -> None:
    settings.SECRET_KEY = DEVELOPMENT_SECRET_KEY
    settings.VAR_DIR = tmp_path
    (tmp_path / "secret_key").write_text("the-servers-key\n")

    with pytest.raises(CommandError, match="DJANGO_SECRET_KEY_FILE="):
        run(*command)

    assert AccessKey.objects.get(name="orders-app").secret_encrypted == ""
    assert not AccessKey.objects.filter(name="new").exists()


def test_the_encryption_check(settings, tmp_path) -> None:
    settings.VAR_DIR = tmp_path
    settings.SECRET_KEY = "a-real-key"
    settings.DEBUG = False
    access_key_secret_encryption_check()  # a key of its own: fine

    settings.SECRET_KEY = DEVELOPMENT_SECRET_KEY
    with pytest.raises(ImproperlyConfigured, match="DJANGO_DEBUG off"):
        access_key_secret_encryption_check()  # the servers refuse that key

    settings.DEBUG = True
    access_key_secret_encryption_check()  # development: the servers use it too

    (tmp_path / "secret_key").write_text("")
    access_key_secret_encryption_check()  # an empty file is no key bin/run made
    (tmp_path / "secret_key").write_text("k")
    with pytest.raises(ImproperlyConfigured, match=str(tmp_path / "secret_key")):
        access_key_secret_encryption_check()


# Another process.

SIGN_IN_A_LOOP = """
import sys, time
import django
django.setup()
from rocketmq.v5.util.signature import Signature
from broker.errors import Unauthorized
from broker.services.access.secrets import signature_authenticate

name, secret, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
date_time = "20240102T030405Z"
header = (
    f"MQv2-HMAC-SHA1 Credential={name}, SignedHeaders=x-mq-date-time, "
    f"Signature={Signature.sign(secret, date_time)}"
)
announced = False
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        signature_authenticate(authorization=header, date_time=date_time)
    except Unauthorized as exc:
        print(f"refused {time.time()} {exc.message}", flush=True)
        sys.exit(0)
    if not announced:
        print(f"accepted {time.time()}", flush=True)  # the key is now in this process's cache
        announced = True
    time.sleep(0.01)
print("never refused", flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_another_process_refuses_a_replaced_secret_within_a_second() -> None:
    from django.conf import settings as django_settings

    from tests.e2e.processes import database_url

    access_key_create(name="orders-app", producer_groups=["G"])
    secret = access_key_secret_set(name="orders-app")
    other = subprocess.Popen(
        [sys.executable, "-c", SIGN_IN_A_LOOP, "orders-app", secret, "30"],
        cwd=Path(__file__).resolve().parents[2],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "halfmoon.settings",
            "DATABASE_URL": database_url(connection.settings_dict["NAME"]),
            "REDIS_URL": django_settings.REDIS_URL,
            "HALFMOON_DB_POOL": "0",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = other.stdout.readline()
        assert line.startswith("accepted "), line + other.stderr.read()

        replaced = time.time()
        access_key_secret_set(name="orders-app")

        out, err = other.communicate(timeout=60)
    finally:
        other.kill()
        other.wait()
    assert out.startswith("refused "), out + err
    assert "does not match" in out
    assert float(out.split()[1]) - replaced < 1.0
