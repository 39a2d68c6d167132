"""The Celery app: settings from Django (``CELERY_*``), beat schedule in django-celery-beat."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")

app = Celery("halfmoon", include=["tasks.checks", "tasks.ops"])
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.on_after_finalize.connect
def _beat_schedule(sender: Celery, **kwargs: object) -> None:
    """Beat fans the back-check scan out per half queue every HALFMOON_CHECK_SCAN_INTERVAL_MS
    and flushes Op messages every HALFMOON_OP_BATCH_INTERVAL_MS (whole seconds).

    Each entry expires before its next run, so a slow scan never piles up behind itself.
    """
    from broker.conf import conf

    every_s = conf.check_scan_interval_s
    op_every_s = conf.op_batch_interval_s
    sender.conf.beat_schedule = {
        "halfmoon-check-dispatch": {
            "task": "tasks.checks.check_dispatch",
            "schedule": every_s,
            "options": {"expires": every_s},
        },
        "halfmoon-op-flush": {
            "task": "tasks.ops.op_flush_all",
            "schedule": op_every_s,
            "options": {"expires": op_every_s},
        },
    }
