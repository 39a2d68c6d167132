"""Django admin of the topology: topics, producer groups and consumer groups.

They are written through the services of ``broker.services.topology.writes`` (``save_model``),
so an object made here is the same as one made through the API: a topic gets its consume
queues, a producer group its ``check_secret``. Their forms run the services' own checks, so a
bad value is a form error, not a 500. They are not deleted here (history names them).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from broker import models
from broker.admin.base import ServiceAdmin, adopt_saved, value_checked
from broker.conf import conf
from broker.rules.message_types import TopicMessageType
from broker.services.topology.writes import (
    check_url_validate,
    consumer_group_create,
    consumer_group_update,
    group_name_validate,
    max_delivery_attempts_validate,
    producer_group_create,
    producer_group_update,
    queue_nums_validate,
    topic_create,
    topic_name_validate,
    topic_update,
)


class TopicForm(forms.ModelForm):
    message_type = forms.ChoiceField(
        choices=TopicMessageType.choices,
        required=False,
        help_text="The type of message the topic accepts (RocketMQ's message.type); MIXED "
        "accepts all. Left out: MIXED for a new topic, unchanged for an existing one.",
    )

    class Meta:
        model = models.Topic
        fields = ["name", "queue_nums", "message_type"]

    def clean_message_type(self) -> str:
        """The chosen type, else the topic's own (MIXED for a new topic)."""
        return self.cleaned_data["message_type"] or self.instance.message_type

    def clean_name(self) -> str:
        return value_checked(self.cleaned_data["name"], topic_name_validate)

    def clean_queue_nums(self) -> int:
        current = None if self.instance._state.adding else self.instance.queue_nums
        return value_checked(
            self.cleaned_data["queue_nums"], lambda n: queue_nums_validate(n, current=current)
        )


@admin.register(models.Topic)
class TopicAdmin(ServiceAdmin):
    """Topics: created with their consume queues; queues may be added, never removed. System
    topics (the broker's own) are view-only."""

    form = TopicForm
    fields = ["name", "queue_nums", "message_type"]
    change_readonly_fields = ("name", "system", "created_timestamp")
    list_display = ["name", "queue_nums", "message_type", "system", "created_timestamp"]
    list_filter = ["system", "message_type"]
    search_fields = ["name"]

    def has_change_permission(self, request: HttpRequest, obj: models.Topic | None = None) -> bool:
        return super().has_change_permission(request, obj) and not (obj and obj.system)

    def save_model(
        self, request: HttpRequest, obj: models.Topic, form: forms.ModelForm, change: bool
    ) -> None:
        write = topic_update if change else topic_create
        adopt_saved(
            obj, write(name=obj.name, queue_nums=obj.queue_nums, message_type=obj.message_type)
        )


class GroupForm(forms.ModelForm):
    """A new producer or consumer group's name passes the services' group-name check."""

    group_kind = "group"

    def clean_name(self) -> str:
        return value_checked(
            self.cleaned_data["name"], lambda n: group_name_validate(self.group_kind, n)
        )


class ProducerGroupForm(GroupForm):
    group_kind = "producer group"
    check_url = forms.URLField(
        max_length=2048,
        required=False,
        assume_scheme="http",
        help_text="Where back-checks are sent; empty: this group's producers poll for them.",
    )

    class Meta:
        model = models.ProducerGroup
        fields = ["name", "check_url"]

    def clean_check_url(self) -> str:
        """The services' check-target rule (``check_url_validate``), as a field error."""
        return value_checked(self.cleaned_data["check_url"], check_url_validate)


@admin.register(models.ProducerGroup)
class ProducerGroupAdmin(ServiceAdmin):
    """Producer groups: created with a random ``check_secret`` (shown on the change page, for
    the producer's signature check); a new ``check_url`` clears the unreachable state."""

    form = ProducerGroupForm
    fields = ["name", "check_url"]
    change_readonly_fields = (
        "name",
        "check_secret",
        "unreachable_since",
        "last_check_error",
        "last_poll_timestamp",
    )
    list_display = ["name", "check_url", "unreachable_since", "last_check_error"]
    search_fields = ["name"]

    def save_model(
        self, request: HttpRequest, obj: models.ProducerGroup, form: forms.ModelForm, change: bool
    ) -> None:
        write = producer_group_update if change else producer_group_create
        adopt_saved(obj, write(name=obj.name, check_url=obj.check_url))


class ConsumerGroupForm(GroupForm):
    group_kind = "consumer group"

    class Meta:
        model = models.ConsumerGroup
        fields = ["name", "max_delivery_attempts"]

    def clean_max_delivery_attempts(self) -> int:
        return value_checked(
            self.cleaned_data["max_delivery_attempts"], max_delivery_attempts_validate
        )


@admin.register(models.ConsumerGroup)
class ConsumerGroupAdmin(ServiceAdmin):
    form = ConsumerGroupForm
    fields = ["name", "max_delivery_attempts"]
    change_readonly_fields = ("name", "created_timestamp")
    list_display = ["name", "max_delivery_attempts", "created_timestamp"]
    search_fields = ["name"]

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """A new group's attempts default to ``HALFMOON_MAX_DELIVERY_ATTEMPTS``."""
        initial = super().get_changeform_initial_data(request)
        initial.setdefault("max_delivery_attempts", conf.max_delivery_attempts)
        return initial

    def save_model(
        self, request: HttpRequest, obj: models.ConsumerGroup, form: forms.ModelForm, change: bool
    ) -> None:
        write = consumer_group_update if change else consumer_group_create
        adopt_saved(obj, write(name=obj.name, max_delivery_attempts=obj.max_delivery_attempts))
