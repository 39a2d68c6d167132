"""The ``fifo_blocked`` alert: fires once on a FIFO consumer group whose message group has been
blocked longer than the threshold (counted from the head's first hand-out), and resolves once
the head is sent to the DLQ. The clock is moved, not waited for (evaluations take ``now``)."""

from __future__ import annotations

from broker.models import Alert, DeliveryEvent
from broker.services.consumption.blocked_message_groups import blocked_message_group_dead_letter
from tests.fifo_state import block_heads, fifo_group, send_group
from tests.services.alerts.conftest import announced, tick
from tests.services.alerts.test_lifecycle import FIRING, RESOLVED, rule


def test_fifo_blocked_fires_past_the_threshold_and_resolves_when_the_head_goes(owner, hook):
    fifo_group("F")
    rule(owner, name="fifo", kind="fifo_blocked", group="F", threshold=300)
    send_group("order-7", 3)
    [got] = block_heads("F")
    since = DeliveryEvent.objects.get(
        msg_id=got.message.msg_id, kind="delivered", delivery_attempt=1
    ).timestamp

    tick(since + 300_000)  # exactly 5 minutes: not past it
    assert announced(hook) == []
    for seconds in (301, 600, 3600):
        tick(since + seconds * 1000)
    assert announced(hook) == [(FIRING, "fifo", "F")]
    alert = Alert.objects.get()
    assert (alert.subject_label, alert.value) == ("consumer_group", 3600.0)
    assert "order-7" in alert.summary and "1 message groups" in alert.summary

    blocked_message_group_dead_letter(
        consumer_group="F",
        topic="Orders",
        message_group="order-7",
        msg_id=got.message.msg_id,
        reason="poison",
        actor="operator:owner",
        via="api",
    )
    tick(since + 3601_000)
    tick(since + 3602_000)
    assert announced(hook) == [(FIRING, "fifo", "F"), (RESOLVED, "fifo", "F")]
