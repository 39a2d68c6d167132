"""The environment the suite runs in, and halfmoon.env's readers (NAME_FILE included)."""

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from halfmoon.env import env_bool, env_int, env_raw, env_str


def test_the_suite_runs_on_postgresql():
    """The tests talk to real PostgreSQL (the only database the settings accept)."""
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


# --- halfmoon.env: typed readers, and NAME_FILE for secrets ---------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    for name in ["HM_TEST", "HM_TEST_FILE"]:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_variable_is_read_from_the_environment_or_defaults(clean_env):
    assert env_str("HM_TEST", "fallback") == "fallback"
    clean_env.setenv("HM_TEST", "")
    assert env_str("HM_TEST", "fallback") == "fallback"
    clean_env.setenv("HM_TEST", "value")
    assert env_str("HM_TEST", "fallback") == "value"


@pytest.fixture
def hm_test_file(clean_env, tmp_path):
    """Write ``content`` to a file and point HM_TEST_FILE at it."""

    def write(content: str) -> None:
        path = tmp_path / "secret"
        path.write_text(content)
        clean_env.setenv("HM_TEST_FILE", str(path))

    return write


def test_a_variable_may_come_from_the_file_its_name_file_names(hm_test_file):
    hm_test_file("postgres://app:s3cret@db:5432/halfmoon\n")

    assert env_raw("HM_TEST") == "postgres://app:s3cret@db:5432/halfmoon"
    assert env_str("HM_TEST", "fallback") == "postgres://app:s3cret@db:5432/halfmoon"


def test_the_variable_itself_wins_over_its_file(hm_test_file, clean_env):
    hm_test_file("from-file")
    clean_env.setenv("HM_TEST", "from-env")

    assert env_str("HM_TEST", "fallback") == "from-env"


def test_typed_readers_read_files_too(hm_test_file):
    hm_test_file(" 42\n")
    assert env_int("HM_TEST", 1, minimum=0) == 42
    hm_test_file("off\n")
    assert env_bool("HM_TEST", True) is False


@pytest.mark.parametrize("content", [None, "", " \n"])
def test_an_unreadable_or_empty_file_stops_the_process(clean_env, tmp_path, content):
    path = tmp_path / "secret"
    if content is not None:
        path.write_text(content)
    clean_env.setenv("HM_TEST_FILE", str(path))

    with pytest.raises(ImproperlyConfigured, match="HM_TEST_FILE="):
        env_str("HM_TEST", "fallback")


@pytest.mark.parametrize(
    ("reader", "raw"),
    [
        (lambda: env_int("HM_TEST", 1), "seven"),
        (lambda: env_int("HM_TEST", 1, maximum=10), "11"),
        (lambda: env_int("HM_TEST", 1, minimum=0), "-1"),
        (lambda: env_bool("HM_TEST", True), "maybe"),
    ],
)
def test_a_value_a_reader_cannot_take_stops_the_process(clean_env, reader, raw):
    clean_env.setenv("HM_TEST", raw)

    with pytest.raises(ImproperlyConfigured, match="HM_TEST="):
        reader()
