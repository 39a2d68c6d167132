"""The console's forms for topics, producer groups and consumer groups (admins only).

The forms only parse what was typed; every rule (names, queue counts, reserved groups,
attempts, uniqueness) is the service's (``broker.services.topology.writes``), and a service's
``InvalidInput`` or ``Conflict`` comes back as an error on the field it is about
(``ServiceErrorsForm.service_error_add``), so a bad input is a form error, never a 500.
"""

from __future__ import annotations

from django import forms

from broker.errors import HalfmoonError
from broker.rules.message_types import TopicMessageType
from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN
from broker.services.topology.writes import max_delivery_attempts_validate
from console.forms.base import ServiceErrorsForm

# Which field a service error code is about; other codes are errors of the whole form.
TOPOLOGY_FIELD_OF_CODE = {
    "invalid_name": "name",
    "reserved_group": "name",
    "system_topic": "name",
    "topic_exists": "name",
    "producer_group_exists": "name",
    "consumer_group_exists": "name",
    "invalid_queue_nums": "queue_nums",
    "invalid_message_type": "message_type",
    "invalid_max_delivery_attempts": "max_delivery_attempts",
    "check_url_not_allowed": "check_url",
}


class TopologyForm(ServiceErrorsForm):
    """A topic or group form: service errors go to the fields ``TOPOLOGY_FIELD_OF_CODE`` names."""

    field_of_code = TOPOLOGY_FIELD_OF_CODE


def _name_field() -> forms.CharField:
    return forms.CharField(
        max_length=127,
        help_text="Letters, digits, %, |, _ and -; at most 127 characters.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


def _queue_nums_field() -> forms.IntegerField:
    return forms.IntegerField(
        label="Queues",
        help_text=f"{QUEUE_NUMS_MIN} to {QUEUE_NUMS_MAX}; queues can be added later, never removed.",
        widget=forms.NumberInput(attrs={"min": QUEUE_NUMS_MIN, "max": QUEUE_NUMS_MAX}),
    )


def _message_type_field() -> forms.ChoiceField:
    return forms.ChoiceField(
        label="Message type",
        choices=TopicMessageType.choices,
        initial=TopicMessageType.MIXED,
        required=False,  # left out: MIXED for a new topic, unchanged for an existing one
        help_text="The type of message the topic accepts (RocketMQ's message.type): NORMAL, "
        "FIFO, DELAY or TRANSACTION; MIXED accepts all. A change applies to the messages sent "
        "from then on.",
    )


def _check_url_field() -> forms.URLField:
    return forms.URLField(
        required=False,
        max_length=2048,
        assume_scheme="https",
        label="Check URL",
        help_text="Where back-checks are POSTed (http or https, a host "
        "HALFMOON_CHECK_URL_ALLOWED_NETWORKS allows); empty: the group's producers poll for them.",
    )


def _attempts_field(*, required: bool) -> forms.IntegerField:
    return forms.IntegerField(
        required=required,
        label="Max delivery attempts",
        help_text="Then the message moves to %DLQ%{group} (RocketMQ maxReconsumeTimes).",
        widget=forms.NumberInput(attrs={"min": 1}),
    )


class TopicCreateForm(TopologyForm):
    """A new topic: ``name``, ``queue_nums`` and ``message_type``
    (``broker.services.topology.writes.topic_create``)."""

    name = _name_field()
    queue_nums = _queue_nums_field()
    message_type = _message_type_field()


class TopicEditForm(TopologyForm):
    """More queues for a topic (``topic_update``; queues are never removed) and its message
    type."""

    queue_nums = _queue_nums_field()
    message_type = _message_type_field()


class ProducerGroupCreateForm(TopologyForm):
    """A new producer group: ``name`` and ``check_url`` (``producer_group_create``)."""

    name = _name_field()
    check_url = _check_url_field()


class ProducerGroupEditForm(TopologyForm):
    """A producer group's ``check_url`` (``producer_group_update``; clears its
    unreachability)."""

    check_url = _check_url_field()


class ConsumerGroupCreateForm(TopologyForm):
    """A new consumer group (``consumer_group_create``); empty attempts: the default
    (``HALFMOON_MAX_DELIVERY_ATTEMPTS``)."""

    name = _name_field()
    max_delivery_attempts = _attempts_field(required=False)

    def clean_max_delivery_attempts(self) -> int | None:
        """A typed number is checked by the service's rule now (the service itself would take
        0 for "the default")."""
        attempts = self.cleaned_data["max_delivery_attempts"]
        if attempts is not None:
            try:
                max_delivery_attempts_validate(attempts)
            except HalfmoonError as error:
                raise forms.ValidationError(error.message, code=error.code) from error
        return attempts


class ConsumerGroupEditForm(TopologyForm):
    """A consumer group's ``max_delivery_attempts`` (``consumer_group_update``)."""

    max_delivery_attempts = _attempts_field(required=True)
