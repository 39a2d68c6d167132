"""The console's message search (``/console/messages/``) by a delay message's due time (with
the topic it is for) and by FIFO message group, as the API's."""

from __future__ import annotations

from django.test import Client

from broker.models import Message
from broker.rules.clock import now_ms
from tests.api_helpers import send_message
from tests.console.conftest import signed_in

HOUR = 3_600_000


def test_the_console_search_takes_the_delay_and_fifo_fields(producer, topic):
    now = now_ms()
    send_message(producer, msg_id="D-1", deliver_at=now + HOUR)
    send_message(producer, msg_id="F-1")
    Message.objects.filter(msg_id="F-1").update(message_group="order-7")
    viewer = Client()
    signed_in(viewer, "viewer")

    page = viewer.get("/console/messages/", {"message_group": "order-7"}).content.decode()
    assert "F-1" in page and "D-1" not in page
    page = viewer.get(
        "/console/messages/", {"topic": "TranTest", "due_start": "2000-01-01T00:00"}
    ).content.decode()
    assert "D-1" in page and "F-1" not in page
    bad = viewer.get(
        "/console/messages/", {"due_start": "2030-01-02T00:00", "due_end": "2030-01-01T00:00"}
    )
    assert bad.status_code == 400
