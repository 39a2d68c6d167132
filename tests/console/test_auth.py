"""Signing in and out of the console: Django's auth views, CSRF on every form."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.console.conftest import PASSWORD, signed_in

pytestmark = pytest.mark.django_db


def test_the_root_leads_an_anonymous_visitor_to_the_sign_in_page():
    client = Client()
    response = client.get("/", follow=True)
    assert response.status_code == 200
    assert response.redirect_chain[-1][0].startswith(reverse("console:login"))
    assert b'name="username"' in response.content
    assert b'name="password"' in response.content
    assert b"csrfmiddlewaretoken" in response.content


def test_an_operator_signs_in_and_lands_on_the_overview(console_user):
    console_user("operator", username="alice")
    client = Client(enforce_csrf_checks=True)
    page = client.get(reverse("console:login"))
    token = page.cookies["csrftoken"].value

    response = client.post(
        reverse("console:login"),
        {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": token},
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("console:overview")
    assert client.session["_auth_user_id"]


def test_sign_in_goes_on_to_next(console_user):
    console_user("viewer", username="bob")
    client = Client()
    response = client.post(
        reverse("console:login"),
        {"username": "bob", "password": PASSWORD, "next": "/console/audit/"},
    )
    assert response["Location"] == "/console/audit/"


def test_sign_in_does_not_go_on_to_another_site(console_user):
    console_user("viewer", username="bob")
    response = Client().post(
        reverse("console:login"),
        {"username": "bob", "password": PASSWORD, "next": "http://evil.example/"},
    )
    assert response["Location"] == reverse("console:overview")


def test_a_wrong_password_is_refused_with_the_form_again(console_user):
    console_user("operator", username="alice")
    client = Client()
    response = client.post(reverse("console:login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content
    assert "_auth_user_id" not in client.session


def test_sign_in_without_the_csrf_token_is_refused(console_user):
    console_user("operator", username="alice")
    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("console:login"), {"username": "alice", "password": PASSWORD})
    assert response.status_code == 403
    assert "_auth_user_id" not in client.session


def test_a_signed_in_visitor_of_the_sign_in_page_goes_to_the_overview():
    client = Client()
    signed_in(client, "viewer")
    response = client.get(reverse("console:login"))
    assert response.status_code == 302
    assert response["Location"] == reverse("console:overview")


def test_the_page_shows_sign_out_as_a_post_form_and_the_feed_url():
    client = Client()
    signed_in(client, "viewer", username="carol")
    # The sign-in page's template is the base every page extends; render it as carol.
    response = client.get(reverse("console:login"), follow=True)
    body = response.content.decode()
    assert "carol (viewer)" in body
    assert f'method="post" action="{reverse("console:logout")}"' in body
    assert 'data-ws-url="/ws/transactions/"' in body


def test_the_anonymous_sign_in_page_opens_no_feed():
    body = Client().get(reverse("console:login")).content.decode()
    assert "data-ws-url" not in body


def test_sign_out_is_a_post_with_the_csrf_token():
    client = Client(enforce_csrf_checks=True)
    signed_in(client, "operator")

    assert client.get(reverse("console:logout")).status_code == 405
    assert client.post(reverse("console:logout")).status_code == 403
    assert "_auth_user_id" in client.session

    page = client.get(reverse("console:login"), follow=True)
    token = page.context["csrf_token"]
    response = client.post(reverse("console:logout"), {"csrfmiddlewaretoken": str(token)})

    assert response.status_code == 302
    assert response["Location"] == reverse("console:login")
    assert "_auth_user_id" not in client.session
