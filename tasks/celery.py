"""The Celery app: settings from Django (``CELERY_*``), beat schedule in django-celery-beat."""

from __future__ import annotations

import os
import sys

from celery import Celery
from celery.signals import import_modules

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")

app = Celery(
    "halfmoon",
    include=[
        "tasks.checks",
        "tasks.op_messages",
        "tasks.operations",
        "tasks.pipeline",
        "tasks.alerts",
    ],
)
app.config_from_object("django.conf:settings", namespace="CELERY")


@import_modules.connect
def _refuse_development_secret_key(sender: Celery, **kwargs: object) -> None:
    """The worker and beat refuse to start with the development SECRET_KEY unless DJANGO_DEBUG
    is on (halfmoon.security). ``import_modules`` is sent when a worker or beat starts, before
    either touches the database or forks; SystemExit ends the process with the message."""
    from halfmoon.security import serving_secret_key_exit

    serving_secret_key_exit("Celery beat" if "beat" in sys.argv else "Celery worker")


@app.on_after_finalize.connect
def _beat_schedule(sender: Celery, **kwargs: object) -> None:
    """Beat fans the back-check scan out per half queue every HALFMOON_CHECK_SCAN_INTERVAL_MS
    flushes Op messages every HALFMOON_OP_BATCH_INTERVAL_MS and archives the logs every
    HALFMOON_ARCHIVE_INTERVAL_MS and evaluates the alert rules (then sends the notifications
    due) every HALFMOON_ALERT_EVALUATION_INTERVAL_MS (whole seconds). The daily reconciliation is a crontab entry
    of its own in django-celery-beat's tables, editable in the admin
    (``broker.services.reconciliation.run``).

    Each entry expires before its next run, so a slow scan never piles up behind itself.
    """
    from broker.conf import conf

    every_s = conf.check_scan_interval_s
    op_every_s = conf.op_batch_interval_s
    archive_every_s = conf.archive_interval_s
    alerts_every_s = conf.alert_evaluation_interval_s
    sender.conf.beat_schedule = {
        "halfmoon-check-dispatch": {
            "task": "tasks.checks.check_dispatch",
            "schedule": every_s,
            "options": {"expires": every_s},
        },
        "halfmoon-op-flush": {
            "task": "tasks.op_messages.op_flush_all",
            "schedule": op_every_s,
            "options": {"expires": op_every_s},
        },
        "halfmoon-archive-export": {
            "task": "tasks.pipeline.archive_export",
            "schedule": archive_every_s,
            "options": {"expires": archive_every_s},
        },
        "halfmoon-alerts": {
            "task": "tasks.alerts.alerts_tick",
            "schedule": alerts_every_s,
            "options": {"expires": alerts_every_s},
        },
    }
