"""The alerts' settings of ``halfmoon.settings`` (it imports them all): where webhooks may
go, the console's address in notifications, and Django's e-mail. docs/settings.md "Alerts and
e-mail" says what each means."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from broker.rules.check_targets import DEFAULT_ALLOWED_NETWORKS, allowed_targets_parse
from halfmoon.env import env_bool, env_int, env_str
from halfmoon.settings_serving import HALFMOON_HOST, HALFMOON_PORT

# --- Alerts (broker.services.alerts) ------------------------------------------------------------
# Where the alerts' webhooks may go: the same syntax and rule as the check URLs (a listed name
# is accepted unresolved when the receiver is saved; every address it resolves to when a
# notification is sent must lie in the networks; link-local, multicast and the broker itself
# are refused whatever this says), a list of its own so that reaching Slack (the internet) does
# not open the check URLs to it.
HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS = [
    entry.strip()
    for entry in env_str(
        "HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS", ",".join(DEFAULT_ALLOWED_NETWORKS)
    ).split(",")
    if entry.strip()
]
try:
    allowed_targets_parse(
        HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS,
        setting="HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS",
        subject="webhook",
    )
except ValueError as _exc:
    raise ImproperlyConfigured(str(_exc)) from _exc
# The console's address as people reach it: the links in notifications (generatorURL,
# externalURL, the e-mails' "Console:" line).
HALFMOON_CONSOLE_URL = env_str(
    "HALFMOON_CONSOLE_URL", f"http://{HALFMOON_HOST}:{HALFMOON_PORT}"
).rstrip("/")
# E-mail notifications go through Django's mail (SMTP by default).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "halfmoon@localhost")
