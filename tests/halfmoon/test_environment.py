from django.conf import settings


def test_the_suite_runs_on_postgresql():
    """The tests talk to real PostgreSQL, never the embedded SQLite default."""
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
