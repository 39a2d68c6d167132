"""``manage.py create_console_user NAME --role viewer|operator|admin [--password P]`` and the
service behind it (``console.services.console_user_create``)."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from console.roles import MANAGE, OPERATE, VIEW
from console.services import console_user_create

pytestmark = pytest.mark.django_db


def create(*args: str) -> str:
    out = io.StringIO()
    call_command("create_console_user", *args, stdout=out)
    return out.getvalue()


def roles_of(username: str) -> list[str]:
    user = get_user_model().objects.get(username=username)
    return sorted(user.groups.values_list("name", flat=True))


class Terminal(io.StringIO):
    """A standard input that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_an_operator_with_a_password_on_the_command_line():
    out = create("alice", "--role", "operator", "--password", "s3cret-enough")

    assert "alice: operator" in out
    user = authenticate(username="alice", password="s3cret-enough")
    assert user is not None
    assert roles_of("alice") == ["operator"]
    assert user.has_perm(VIEW) and user.has_perm(OPERATE) and not user.has_perm(MANAGE)
    assert not user.is_staff and not user.is_superuser


def test_an_admin_may_open_the_django_admin_but_is_no_superuser():
    create("root", "--role", "admin", "--password", "s3cret-enough")
    user = get_user_model().objects.get(username="root")
    assert user.is_staff and not user.is_superuser
    assert user.has_perm(MANAGE)


def test_a_role_change_leaves_exactly_the_new_role():
    create("bob", "--role", "admin", "--password", "s3cret-enough")
    out = create("bob", "--role", "viewer", "--password", "an0ther-one")

    assert "bob: viewer" in out
    user = get_user_model().objects.get(username="bob")
    assert roles_of("bob") == ["viewer"]
    assert not user.is_staff
    assert user.has_perm(VIEW) and not user.has_perm(OPERATE)
    assert authenticate(username="bob", password="an0ther-one") is not None
    assert get_user_model().objects.filter(username="bob").count() == 1


def test_groups_that_are_not_roles_are_kept():
    from django.contrib.auth.models import Group

    user = console_user_create(username="dora", role="viewer", password="s3cret-enough")
    user.groups.add(Group.objects.create(name="night-shift"))
    console_user_create(username="dora", role="operator", password="s3cret-enough")
    assert roles_of("dora") == ["night-shift", "operator"]


def test_a_bad_role_is_refused():
    with pytest.raises(CommandError, match="invalid choice"):
        create("eve", "--role", "superuser", "--password", "s3cret-enough")
    with pytest.raises(ValidationError, match="Unknown role"):
        console_user_create(username="eve", role="superuser", password="s3cret-enough")  # type: ignore[arg-type]
    assert not get_user_model().objects.filter(username="eve").exists()


def test_a_short_password_is_refused():
    with pytest.raises(CommandError, match="at least 8 characters"):
        create("frank", "--role", "viewer", "--password", "short")
    assert not get_user_model().objects.filter(username="frank").exists()


def test_the_password_is_asked_for_twice_on_a_terminal(monkeypatch):
    prompts: list[str] = []

    def getpass(prompt: str = "") -> str:
        prompts.append(prompt)
        return "typed-secret"

    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("getpass.getpass", getpass)

    create("gina", "--role", "viewer")

    assert prompts == ["Password: ", "Password (again): "]
    assert authenticate(username="gina", password="typed-secret") is not None


def test_two_different_passwords_are_refused(monkeypatch):
    answers = iter(["typed-secret", "typed-secreT"])
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))

    with pytest.raises(CommandError, match="differ"):
        create("hank", "--role", "viewer")
    assert not get_user_model().objects.filter(username="hank").exists()


def test_without_a_terminal_and_without_a_password_it_fails_clearly(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO())
    with pytest.raises(CommandError, match="No --password given and no terminal"):
        create("ivan", "--role", "viewer")
