from django.conf import settings


def test_tests_run_on_postgresql():
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
