"""Sign-in throttling: after ``AXES_FAILURE_LIMIT`` (5) failed sign-ins in a
row a username is locked at that client address for ``AXES_COOLOFF_TIME`` (15 minutes), the
right password included, on the console's sign-in page and on /admin/'s alike; the lockout
page says for how long and how an administrator unlocks it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.test import AsyncClient, Client
from django.urls import reverse

from tests.console.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
LOGIN = reverse("console:login")
ADMIN_LOGIN = "/admin/login/"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """MD5 instead of PBKDF2 for the test users: these tests sign in some hundred times."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def sign_in(client: Client, username: str, password: str, *, url: str = LOGIN, address=None):
    """POST the sign-in form of ``url`` from ``address`` (REMOTE_ADDR, default 127.0.0.1)."""
    extra = {"REMOTE_ADDR": address} if address else {}
    return client.post(url, {"username": username, "password": password}, **extra)


def test_twenty_wrong_passwords_are_not_all_answered(console_user):
    console_user("operator", username="alice")
    client = Client()

    statuses = [sign_in(client, "alice", f"wrong-{n}").status_code for n in range(20)]

    # the first four get the form again; the fifth failure locks, and every later one is refused
    assert statuses == [200] * 4 + [429] * 16


def test_the_lockout_page_says_for_how_long_and_how_to_unlock(console_user):
    console_user("operator", username="alice")
    client = Client()
    for n in range(4):
        page = sign_in(client, "alice", f"wrong-{n}")
        assert b"Please enter a correct username and password" in page.content

    locked = sign_in(client, "alice", "wrong-again")

    assert locked.status_code == 429
    assert locked["Content-Type"].startswith("text/html")
    text = locked.content.decode()
    assert "Sign-in locked" in text
    assert "Too many failed sign-ins for alice from this address (5 in a row)" in text
    assert "locked for 15 minutes" in text
    assert "manage.py axes_reset_username alice" in text
    assert "Access attempts" in text  # the Django admin's way
    assert f'href="{LOGIN}"' in text


def test_the_right_password_is_refused_while_locked(console_user):
    console_user("operator", username="alice")
    client = Client()
    for n in range(5):
        sign_in(client, "alice", f"wrong-{n}")

    response = sign_in(client, "alice", PASSWORD)

    assert response.status_code == 429
    assert b"Sign-in locked" in response.content
    assert "_auth_user_id" not in client.session


def test_the_lock_holds_one_username_at_one_address(console_user):
    console_user("operator", username="alice")
    console_user("viewer", username="bob")
    for n in range(5):
        sign_in(Client(), "alice", f"wrong-{n}", address="10.0.0.7")

    assert sign_in(Client(), "alice", PASSWORD, address="10.0.0.7").status_code == 429
    # alice from another address, and bob from the same one, sign in
    assert sign_in(Client(), "alice", PASSWORD, address="10.0.0.8").status_code == 302
    assert sign_in(Client(), "bob", PASSWORD, address="10.0.0.7").status_code == 302


def test_an_admin_unlocks_with_axes_reset_username(console_user):
    console_user("operator", username="alice")
    client = Client()
    for n in range(5):
        sign_in(client, "alice", f"wrong-{n}")
    assert sign_in(client, "alice", PASSWORD).status_code == 429

    call_command("axes_reset_username", "alice", stdout=open(os.devnull, "w"))  # noqa: SIM115

    response = sign_in(client, "alice", PASSWORD)
    assert response.status_code == 302
    assert response["Location"] == reverse("console:overview")
    assert client.session["_auth_user_id"]


def test_a_successful_sign_in_forgets_the_failures(console_user):
    console_user("operator", username="alice")
    for n in range(4):
        sign_in(Client(), "alice", f"wrong-{n}")
    assert sign_in(Client(), "alice", PASSWORD).status_code == 302

    # four more failures after the success do not lock: the count started again
    assert [sign_in(Client(), "alice", f"again-{n}").status_code for n in range(4)] == [200] * 4


def test_the_lock_ends_after_the_cool_off(console_user, settings):
    console_user("operator", username="alice")
    for n in range(5):
        sign_in(Client(), "alice", f"wrong-{n}")
    assert sign_in(Client(), "alice", PASSWORD).status_code == 429

    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    time.sleep(1.2)  # a cool-off since the last attempt

    assert sign_in(Client(), "alice", PASSWORD).status_code == 302


def test_the_limit_and_the_cool_off_come_from_the_settings(console_user, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.AXES_COOLOFF_TIME = timedelta(minutes=30)
    console_user("operator", username="alice")

    statuses = [sign_in(Client(), "alice", f"wrong-{n}") for n in range(2)]

    assert [r.status_code for r in statuses] == [200, 429]
    assert b"locked for 30 minutes" in statuses[1].content
    assert b"(2 in a row)" in statuses[1].content


def test_the_django_admin_login_is_throttled_too(console_user):
    console_user("admin", username="root")  # staff: may sign in to /admin/
    client = Client()

    statuses = [sign_in(client, "root", f"wrong-{n}", url=ADMIN_LOGIN) for n in range(5)]
    refused = sign_in(client, "root", PASSWORD, url=ADMIN_LOGIN)

    assert [r.status_code for r in statuses] == [200] * 4 + [429]
    assert refused.status_code == 429
    assert b"Sign-in locked" in refused.content
    assert f'href="{ADMIN_LOGIN}"'.encode() in refused.content
    assert "_auth_user_id" not in client.session


def test_the_console_and_the_admin_count_the_same_failures(console_user):
    console_user("admin", username="root")
    for n in range(3):
        sign_in(Client(), "root", f"wrong-{n}", url=ADMIN_LOGIN)
    sign_in(Client(), "root", "wrong-3")

    assert sign_in(Client(), "root", "wrong-4").status_code == 429


def test_the_lockout_page_is_served_over_asgi_too(console_user):
    """uvicorn runs the middleware chain asynchronously (AxesMiddleware.__acall__)."""
    console_user("operator", username="alice")

    async def attempts() -> list:
        client = AsyncClient()
        answers = []
        for password in [*(f"wrong-{n}" for n in range(5)), PASSWORD]:
            answers.append(await client.post(LOGIN, {"username": "alice", "password": password}))
        return answers

    answers = async_to_sync(attempts)()

    assert [a.status_code for a in answers] == [200] * 4 + [429, 429]
    assert b"locked for 15 minutes" in answers[-1].content
    assert b"manage.py axes_reset_username alice" in answers[-1].content


def test_a_check_of_a_password_without_a_request_is_not_throttled(console_user):
    """``authenticate()`` with no request (management commands, a shell) has no address to
    throttle: it checks the password as Django always did."""
    console_user("operator", username="alice")

    assert authenticate(username="alice", password=PASSWORD) is not None
    assert authenticate(username="alice", password="wrong") is None


def test_an_unknown_lockout_mode_stops_the_process_at_start():
    env = {**os.environ, "HALFMOON_LOGIN_LOCKOUT_BY": "everyone"}
    done = subprocess.run(
        [sys.executable, "-c", "import halfmoon.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "HALFMOON_LOGIN_LOCKOUT_BY='everyone' is not one of user_and_address" in done.stderr
