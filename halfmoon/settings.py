"""Django settings for Halfmoon, read from the environment.

The settings are in parts, each imported whole here: ``settings_database`` (``DATABASES``),
``settings_serving`` (web server, Redis, Channels, Celery, gRPC server) and ``settings_alerts``
(webhooks, console URL, e-mail); the rest is below. Every broker setting keeps its RocketMQ name
and default (broker/rules/broker_settings.py). docs/settings.md is rendered from all of them
(``halfmoon.settings_doc``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from broker.pipeline import DRIVER_MEMORY_DEFAULT
from broker.rules.broker_settings import BROKER_SETTINGS
from broker.rules.check_targets import DEFAULT_ALLOWED_NETWORKS, allowed_targets_parse
from halfmoon.env import env_bool, env_int, env_str
from halfmoon.security import DEVELOPMENT_SECRET_KEY
from halfmoon.settings_alerts import *  # noqa: F403
from halfmoon.settings_database import *  # noqa: F403
from halfmoon.settings_serving import *  # noqa: F403

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("HALFMOON_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# The development key is refused at the start of the web server, worker and beat unless
# DJANGO_DEBUG is on (halfmoon.security); DJANGO_SECRET_KEY_FILE may hold the key instead.
SECRET_KEY = env_str("DJANGO_SECRET_KEY", DEVELOPMENT_SECRET_KEY)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [
    h
    for h in env_str("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver").split(",")
    if h
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_celery_beat",
    "broker",
    "console",
    "axes",  # sign-in throttling (see "Sign-in throttling" below)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything can query with it: NUL in a path (404) or query parameter (400).
    "halfmoon.nul_guard.NulGuardMiddleware",
    # Django's session, CSRF, auth and messages middleware, passed over by api-v1's requests,
    # which authenticate by access key and keep no session (halfmoon.console_middleware).
    "halfmoon.console_middleware.ConsoleSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "halfmoon.console_middleware.ConsoleCsrfViewMiddleware",
    "halfmoon.console_middleware.ConsoleAuthenticationMiddleware",
    "halfmoon.console_middleware.ConsoleMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a refused sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "halfmoon.urls"
LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:overview"
LOGOUT_REDIRECT_URL = "console:login"
WSGI_APPLICATION = "halfmoon.wsgi.application"
ASGI_APPLICATION = "halfmoon.asgi.application"

# --- Sign-in throttling (django-axes) ---------------------------------------------------------
# Every sign-in through a request (the console's and /admin/'s) is counted per username and
# client address; after HALFMOON_LOGIN_FAILURE_LIMIT failures in a row that combination is
# refused, right password included, for HALFMOON_LOGIN_COOLOFF_MINUTES after the last attempt,
# with the page of console.views.auth.locked_out (429). Failures are kept in the database
# (axes' AccessAttempt), so every web process sees them. The client address is REMOTE_ADDR:
# uvicorn already sets it from X-Forwarded-For when the proxy is one it trusts
# (FORWARDED_ALLOW_IPS, default 127.0.0.1,::1). Unlock: `manage.py axes_reset_username NAME`,
# `axes_reset_ip ADDRESS`, or delete the access attempt in /admin/ (superuser).
AUTHENTICATION_BACKENDS = [
    "console.throttle.SignInThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Scoped operators: the object permission console.operate_console on a group's objects
    # (console.permissions, broker.models.OperatorGrant).
    "console.permissions.OperatorGrantBackend",
]
_LOCKOUT_BY = {
    "user_and_address": [["username", "ip_address"]],
    "user": ["username"],
    "address": ["ip_address"],
    "user_or_address": ["username", "ip_address"],
}
_lockout_by = env_str("HALFMOON_LOGIN_LOCKOUT_BY", "user_and_address")
if _lockout_by not in _LOCKOUT_BY:
    raise ImproperlyConfigured(
        f"HALFMOON_LOGIN_LOCKOUT_BY={_lockout_by!r} is not one of {', '.join(_LOCKOUT_BY)}"
    )
AXES_LOCKOUT_PARAMETERS = _LOCKOUT_BY[_lockout_by]
AXES_FAILURE_LIMIT = env_int("HALFMOON_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("HALFMOON_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_RESET_ON_SUCCESS = True  # a successful sign-in forgets that combination's failures
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = True  # each refused attempt restarts the wait
AXES_LOCKOUT_CALLABLE = "console.views.auth.locked_out"
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.permissions.console_context",
                "console.context.alerts_banner",
            ],
        },
    },
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Access keys, topics and groups are cached per process by broker.lookups itself.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "default"},
}

# --- Broker settings (RocketMQ names and defaults; see broker/rules/broker_settings.py) -----------
HALFMOON_SETTINGS: dict[str, int] = {
    spec.name: env_int(spec.name, spec.default, minimum=spec.minimum, maximum=spec.maximum)
    for spec in BROKER_SETTINGS
}

if 3_600_000 % HALFMOON_SETTINGS["HALFMOON_ARCHIVE_SEGMENT_MS"]:
    raise ImproperlyConfigured(
        "HALFMOON_ARCHIVE_SEGMENT_MS must divide an hour (3600000 ms): the archive is "
        "partitioned by date and hour, and a segment never spans two hours."
    )

# --- Back-check targets (broker.rules.check_targets, broker.services.checks.targets) --------
# The hosts and networks a check_url may reach: comma-separated CIDRs and host names (a listed
# name is accepted when the URL is set without resolving it; when a check is sent, every
# address a name resolves to must lie in the networks). Link-local and multicast addresses are
# refused whatever this says, and so is the broker's own HALFMOON_HOST:HALFMOON_PORT (the
# address and port the quick start's web server serves, deploy/supervisord.conf).
HALFMOON_CHECK_URL_ALLOWED_NETWORKS = [
    entry.strip()
    for entry in env_str(
        "HALFMOON_CHECK_URL_ALLOWED_NETWORKS", ",".join(DEFAULT_ALLOWED_NETWORKS)
    ).split(",")
    if entry.strip()
]
try:
    allowed_targets_parse(HALFMOON_CHECK_URL_ALLOWED_NETWORKS)
except ValueError as _exc:
    raise ImproperlyConfigured(str(_exc)) from _exc

# --- The data pipeline (archive to Parquet, reconciliation on Spark; broker/pipeline) -------
# Where the logs are archived: a path (relative paths under the project) or a URI Spark's
# Hadoop connectors read: file://, s3a://, hdfs://.
HALFMOON_ARCHIVE_URI = env_str("HALFMOON_ARCHIVE_URI", str(VAR_DIR / "archive"))
if "://" not in HALFMOON_ARCHIVE_URI and not HALFMOON_ARCHIVE_URI.startswith("file:"):
    # A bare path is made absolute: a cluster's executors do not share the driver's directory.
    HALFMOON_ARCHIVE_URI = str((BASE_DIR / HALFMOON_ARCHIVE_URI).resolve())
# The Spark master of the archive export and the reconciliation: local[*], local[2],
# local-cluster[2,1,1024], spark://host:7077.
HALFMOON_SPARK_MASTER = env_str("HALFMOON_SPARK_MASTER", "local[*]")
HALFMOON_SPARK_DRIVER_MEMORY = env_str("HALFMOON_SPARK_DRIVER_MEMORY", DRIVER_MEMORY_DEFAULT)

# Request bodies: a 4 MiB body is ~5.6 MB as base64, plus properties and JSON framing.
DATA_UPLOAD_MAX_MEMORY_SIZE = HALFMOON_SETTINGS["HALFMOON_MAX_MESSAGE_SIZE"] * 2 + 1024 * 1024

# --- REST framework and OpenAPI --------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["broker.api.authentication.AccessKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["broker.api.permissions.IsAuthenticatedKey"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["broker.api.parsers.LimitedJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "broker.api.negotiation.JSONFirstNegotiation",
    "EXCEPTION_HANDLER": "broker.api.exceptions.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Halfmoon broker API",
    "DESCRIPTION": "Apache RocketMQ's transactional messages over HTTP: half messages, "
    "end-transaction, back-checks and SimpleConsumer receive/ack (api-v1).",
    "VERSION": "1.0.0",
    # 3.1 (JSON Schema 2020-12): property names can be constrained (broker/api/schema.py).
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # The single end and the end-batch items share one enum, under the name it always had.
    "ENUM_NAME_OVERRIDES": {
        "TransactionEndInActionEnum": "broker.rules.states.END_ACTIONS",
        "AlertKindEnum": "broker.rules.alerts.AlertKind.choices",
        "AlertSeverityEnum": "broker.rules.alerts.AlertSeverity.choices",
        "AlertReceiverKindEnum": "broker.api.serializers.alert_receivers.RECEIVER_KINDS",
        "BulkActionStateEnum": "broker.api.serializers.bulk.BULK_STATES",
        "AlertStateEnum": "broker.api.serializers.alert_history.ALERT_STATES",
        "ScheduledStateEnum": "broker.api.serializers.scheduled_messages.SCHEDULED_STATES",
        "TopicMessageTypeEnum": "broker.rules.message_types.TopicMessageType.choices",
    },
}

# --- Static files, i18n ----------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# uvicorn serves no files: halfmoon.asgi answers /static/ (the admin's and the offline Swagger
# UI's sidecar assets) with servestatic, in front of Django, from the files `manage.py
# collectstatic` gathered into STATIC_ROOT (bin/run runs it before starting); with DJANGO_DEBUG
# on it looks the files up again on each request. The API's requests pass no extra middleware.
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Everything goes to stderr. django.request logs each 5xx answer (an unexpected error with its
# traceback) naming the request id that the error body's details.request_id carries
# (broker.plumbing.request_id); the API error handler's own lines are on the halfmoon logger.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "broker.plumbing.request_id.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "request": {
            "format": "%(asctime)s %(levelname)s %(name)s request_id=%(request_id)s %(message)s"
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.stderr",
        },
        "requests": {
            "class": "logging.StreamHandler",
            "formatter": "request",
            "filters": ["request_id"],
            "stream": "ext://sys.stderr",
        },
    },
    "loggers": {
        "halfmoon": {"handlers": ["console"], "level": env_str("HALFMOON_LOG_LEVEL", "INFO")},
        "django.request": {"handlers": ["requests"], "level": "ERROR"},
    },
}
