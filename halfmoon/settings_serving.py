"""The serving settings of ``halfmoon.settings`` (it imports them all): the web server's
address and threads, Redis, Channels and Celery, and the gRPC server. docs/settings.md
"Serving" and "gRPC server" say what each means."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from halfmoon.env import env_bool, env_int, env_str

# --- Web server -------------------------------------------------------------------------------
# The address and port the quick start's web server serves (deploy/supervisord.conf).
HALFMOON_HOST = env_str("HALFMOON_HOST", "127.0.0.1")
HALFMOON_PORT = env_int("HALFMOON_PORT", 8000, minimum=1, maximum=65535)
# Threads per web process serving the views (every HTTP request; a long poll's wait is in the
# event loop) through Django's WSGI handler (halfmoon.serving): at most that many requests per
# process run, and hold a database connection, at once.
HALFMOON_WEB_THREADS = env_int("HALFMOON_WEB_THREADS", 4, minimum=1)

# --- Redis, Channels, Celery -----------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": "halfmoon:channels"},
    }
}

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Spark work runs on its own queue and worker process (deploy/supervisord.conf: pipeline), so a long
# reconciliation never delays a back-check, and one process keeps the Spark session.
CELERY_TASK_ROUTES = {"tasks.pipeline.*": {"queue": "pipeline"}}

# --- gRPC server (python -m halfmoon.grpc, broker.grpc; docs/operations.md "gRPC server") -------
# HALFMOON_GRPC_PORT is a broker setting (broker.rules.broker_settings). The address the gRPC
# processes listen on; QueryRoute and QueryAssignment answer HALFMOON_GRPC_ENDPOINT, the address
# clients reach them at ("host:port"; default this host and port, the machine's host name when
# listening on every address).
HALFMOON_GRPC_HOST = env_str("HALFMOON_GRPC_HOST", "") or HALFMOON_HOST
HALFMOON_GRPC_ENDPOINT = env_str("HALFMOON_GRPC_ENDPOINT", "")
# TLS: both files (PEM) set, or neither (plaintext).
HALFMOON_GRPC_TLS_CERT_FILE = env_str("HALFMOON_GRPC_TLS_CERT_FILE", "")
HALFMOON_GRPC_TLS_KEY_FILE = env_str("HALFMOON_GRPC_TLS_KEY_FILE", "")
if bool(HALFMOON_GRPC_TLS_CERT_FILE) != bool(HALFMOON_GRPC_TLS_KEY_FILE):
    raise ImproperlyConfigured(
        "Set both HALFMOON_GRPC_TLS_CERT_FILE and HALFMOON_GRPC_TLS_KEY_FILE (TLS) or neither "
        "(plaintext)."
    )
# Calls without an ``authorization`` header (or with an empty Credential): refused unless true.
HALFMOON_GRPC_ALLOW_ANONYMOUS = env_bool("HALFMOON_GRPC_ALLOW_ANONYMOUS", False)
# Threads per gRPC process running the calls' service calls (each holds a database connection
# while it runs); long polls and telemetry streams wait in the event loop, not in a thread.
HALFMOON_GRPC_THREADS = env_int("HALFMOON_GRPC_THREADS", 8, minimum=1)

# --- RocketMQ 4.x remoting server (python -m halfmoon.remoting, broker.remoting; ------------------
# docs/rocketmq-clients.md "RocketMQ 4.x clients (remoting)"). One process serves the NameServer
# port and the broker port; GET_ROUTEINFO_BY_TOPIC names HALFMOON_REMOTING_ADVERTISED_ADDRESS
# ("IPv4:port"; default 127.0.0.1 and the broker port), the address clients reach the broker at.
HALFMOON_REMOTING_HOST = env_str("HALFMOON_REMOTING_HOST", "") or HALFMOON_HOST
HALFMOON_NAMESRV_PORT = env_int("HALFMOON_NAMESRV_PORT", 9876, minimum=1, maximum=65535)
HALFMOON_REMOTING_PORT = env_int("HALFMOON_REMOTING_PORT", 10911, minimum=1, maximum=65535)
HALFMOON_REMOTING_ADVERTISED_ADDRESS = env_str("HALFMOON_REMOTING_ADVERTISED_ADDRESS", "")
# RocketMQ 4.x ACL signatures are not checked yet: every remoting request is refused unless true.
HALFMOON_REMOTING_ALLOW_ANONYMOUS = env_bool("HALFMOON_REMOTING_ALLOW_ANONYMOUS", False)
HALFMOON_REMOTING_THREADS = env_int("HALFMOON_REMOTING_THREADS", 8, minimum=1)
