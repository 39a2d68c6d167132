"""Alerts: the alert rules, receivers, silences, alerts and notifications
(``broker.services.alerts``); a producer group's ``unanswered_since`` (the ``group_unreachable``
rule, ``broker.rules.checks.group_down_since``); the event rollup keyed by producer group with
the latest event's time (``halfmoon_producer_group_checks_total`` and the last answered check),
refolded from the start; a partial index of the dead letters per consumer group; the audit
log's silence actions."""

import broker.models
import django.db.models.deletion
from django.db import migrations, models


def event_rollup_reset(apps, schema_editor):
    """The event rollup's rows were counted without producer groups: forget them, so the next
    scrape folds the journal again from the start (as ``metrics_rollup_reset`` does)."""
    apps.get_model("broker", "MetricRollup").objects.filter(source_id="event").delete()
    apps.get_model("broker", "MetricWatermark").objects.filter(source="event").update(last_id=0)


def unanswered_since_set(apps, schema_editor):
    """A group backed off now (checks not answered) counts as unanswered since the migration:
    the time its failures began was not kept."""
    apps.get_model("broker", "ProducerGroup").objects.filter(check_failures__gt=0).update(
        unanswered_since=broker.models.now_ms()
    )


class Migration(migrations.Migration):

    dependencies = [
        ('broker', '0007_reconcile_schedule'),
    ]

    operations = [
        migrations.CreateModel(
            name='Alert',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rule_name', models.CharField(max_length=127)),
                ('kind', models.CharField(choices=[('oldest_pending', 'Oldest Pending'), ('near_check_max', 'Near Check Max'), ('group_unreachable', 'Group Unreachable'), ('discard_rate', 'Discard Rate'), ('dlq_growing', 'Dlq Growing')], max_length=32)),
                ('severity', models.CharField(choices=[('warning', 'Warning'), ('critical', 'Critical')], max_length=16)),
                ('subject_label', models.CharField(max_length=16)),
                ('subject', models.CharField(max_length=127)),
                ('state', models.CharField(choices=[('firing', 'Firing'), ('resolved', 'Resolved')], default='firing', max_length=16)),
                ('value', models.FloatField(default=0.0)),
                ('summary', models.CharField(blank=True, default='', max_length=512)),
                ('started_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
                ('evaluated_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
                ('resolved_timestamp', models.BigIntegerField(blank=True, null=True)),
                ('notified', models.BooleanField(default=False)),
                ('last_notified_timestamp', models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.CreateModel(
            name='AlertNotification',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('receiver_name', models.CharField(max_length=127)),
                ('event', models.CharField(choices=[('firing', 'Firing'), ('reminder', 'Reminder'), ('resolved', 'Resolved')], max_length=16)),
                ('state', models.CharField(choices=[('pending', 'Pending'), ('sent', 'Sent'), ('failed', 'Failed')], default='pending', max_length=16)),
                ('payload', models.JSONField(default=dict)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('next_attempt_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
                ('last_error', models.CharField(blank=True, default='', max_length=1024)),
                ('created_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
                ('sent_timestamp', models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.CreateModel(
            name='AlertReceiver',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=127, unique=True)),
                ('kind', models.CharField(choices=[('alertmanager', 'Alertmanager'), ('slack', 'Slack'), ('email', 'Email')], max_length=16)),
                ('url', models.URLField(blank=True, default='', max_length=2048)),
                ('emails', models.JSONField(blank=True, default=list)),
                ('secret', models.CharField(help_text='HMAC-SHA256 key of the signature', max_length=128)),
                ('enabled', models.BooleanField(default=True)),
                ('created_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='AlertRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=127, unique=True)),
                ('kind', models.CharField(choices=[('oldest_pending', 'Oldest Pending'), ('near_check_max', 'Near Check Max'), ('group_unreachable', 'Group Unreachable'), ('discard_rate', 'Discard Rate'), ('dlq_growing', 'Dlq Growing')], max_length=32)),
                ('group', models.CharField(blank=True, default='', help_text='One group, or empty for every group', max_length=127)),
                ('threshold', models.BigIntegerField()),
                ('window_s', models.PositiveIntegerField(default=3600)),
                ('severity', models.CharField(choices=[('warning', 'Warning'), ('critical', 'Critical')], default='warning', max_length=16)),
                ('repeat_interval_s', models.PositiveIntegerField(blank=True, null=True)),
                ('enabled', models.BooleanField(default=True)),
                ('description', models.TextField(blank=True, default='')),
                ('created_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
                ('updated_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='AlertSilence',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('group', models.CharField(blank=True, default='', max_length=127)),
                ('starts_timestamp', models.BigIntegerField(default=broker.models.now_ms)),
                ('ends_timestamp', models.BigIntegerField()),
                ('reason', models.TextField()),
                ('created_by', models.CharField(max_length=160)),
                ('expired_by', models.CharField(blank=True, default='', max_length=160)),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.RemoveConstraint(
            model_name='metricrollup',
            name='one_metric_rollup',
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='last_timestamp',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='producer_group',
            field=models.CharField(blank=True, default='', max_length=127),
        ),
        migrations.AddField(
            model_name='producergroup',
            name='unanswered_since',
            field=models.BigIntegerField(blank=True, help_text='First check round with no answer in time since the last answered one (ms)', null=True),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='action',
            field=models.CharField(choices=[('commit', 'Commit'), ('rollback', 'Rollback'), ('resume-check', 'Resume Check'), ('check-now', 'Check Now'), ('bulk-commit', 'Bulk Commit'), ('bulk-rollback', 'Bulk Rollback'), ('bulk-resume-check', 'Bulk Resume Check'), ('silence-alert', 'Silence Alert'), ('expire-silence', 'Expire Silence')], max_length=24),
        ),
        migrations.AddIndex(
            model_name='deliveryevent',
            index=models.Index(condition=models.Q(('kind', 'dead_lettered')), fields=['consumer_group', 'timestamp'], name='delivery_event_dead_letters'),
        ),
        migrations.AddConstraint(
            model_name='metricrollup',
            constraint=models.UniqueConstraint(fields=('source', 'kind', 'label', 'producer_group'), name='one_metric_rollup'),
        ),
        migrations.AddField(
            model_name='alertnotification',
            name='alert',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='notifications', to='broker.alert'),
        ),
        migrations.AddField(
            model_name='alertnotification',
            name='receiver',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='broker.alertreceiver'),
        ),
        migrations.AddConstraint(
            model_name='alertrule',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['oldest_pending', 'near_check_max', 'group_unreachable', 'discard_rate', 'dlq_growing'])), name='alert_rule_kind_valid'),
        ),
        migrations.AddConstraint(
            model_name='alertrule',
            constraint=models.CheckConstraint(condition=models.Q(('threshold__gte', 0)), name='alert_rule_threshold'),
        ),
        migrations.AddField(
            model_name='alert',
            name='rule',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='alerts', to='broker.alertrule'),
        ),
        migrations.AddField(
            model_name='alertsilence',
            name='audit_entry',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='broker.auditentry'),
        ),
        migrations.AddField(
            model_name='alertsilence',
            name='rule',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='silences', to='broker.alertrule'),
        ),
        migrations.AddIndex(
            model_name='alertnotification',
            index=models.Index(condition=models.Q(('state', 'pending')), fields=['next_attempt_timestamp'], name='alert_notification_due'),
        ),
        migrations.AddIndex(
            model_name='alertnotification',
            index=models.Index(fields=['state', '-id'], name='alert_notification_state'),
        ),
        migrations.AddIndex(
            model_name='alert',
            index=models.Index(condition=models.Q(('state', 'firing')), fields=['started_timestamp'], name='alert_firing'),
        ),
        migrations.AddConstraint(
            model_name='alert',
            constraint=models.UniqueConstraint(condition=models.Q(('state', 'firing')), fields=('rule', 'subject'), name='one_firing_alert_per_rule_group'),
        ),
        migrations.AddIndex(
            model_name='alertsilence',
            index=models.Index(fields=['rule', 'ends_timestamp'], name='alert_silence_rule_end'),
        ),
        migrations.RunPython(event_rollup_reset, migrations.RunPython.noop),
        migrations.RunPython(unanswered_since_set, migrations.RunPython.noop),
    ]
