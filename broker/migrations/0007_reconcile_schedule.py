"""The daily reconciliation as a django-celery-beat entry (``tasks.pipeline.reconcile`` at
03:00 UTC), created once here and never at start, so an operator's edit in the admin (another
time, disabled) holds across restarts. Beat routes the task to the ``pipeline`` queue
(``CELERY_TASK_ROUTES``); a run not started within 12 hours expires, and the next one covers
its window (a run starts where the last successful one ended)."""

from django.db import migrations

ENTRY = "halfmoon-reconcile"
TASK = "tasks.pipeline.reconcile"


def schedule_create(apps, schema_editor):
    crontab_model = apps.get_model("django_celery_beat", "CrontabSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    if task_model.objects.filter(name=ENTRY).exists():
        return
    crontab, _ = crontab_model.objects.get_or_create(
        minute="0",
        hour="3",
        day_of_week="*",
        day_of_month="*",
        month_of_year="*",
        timezone="UTC",
    )
    task_model.objects.create(
        name=ENTRY,
        task=TASK,
        crontab=crontab,
        expire_seconds=12 * 3600,
        description="Reconcile the archived logs daily (broker.services.reconciliation): "
        "every transaction settled since the last run. Edit the time here; it is kept.",
    )


def schedule_delete(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        name=ENTRY, task=TASK
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("broker", "0006_end_refused"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule_create, schedule_delete)]
