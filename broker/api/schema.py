"""OpenAPI schema corrections: where drf-spectacular's reading of a serializer says less, or
other, than what the view enforces, these extensions make the document say exactly what the
broker does (tests/api/test_schema_truth.py).

Imported by ``broker.api.views`` so the extensions are registered before any schema is built.
"""

from __future__ import annotations

import copy
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from broker.api.serializers.incident_export import SCOPES
from broker.constants import RESERVED_PROPERTIES
from broker.models import AlertReceiver
from broker.rules.checks import MAX_CHECK_IMMUNITY_SECONDS
from broker.rules.timers import DELAY_LEVELS_MS

NO_NUL_PATTERN = "^[^\\u0000]*$"
"""A string without NUL (U+0000): DRF's CharField refuses it, PostgreSQL cannot store it."""

BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
"""Standard padded base64, what ``base64.b64decode(..., validate=True)`` accepts."""

_ATOM = "[-!#$%&'*+/=?^_`{}|~0-9A-Za-z]+"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
EMAIL_PATTERN = (
    f"^[ \\t\\r\\n]*{_ATOM}(?:[.]{_ATOM})*@(?:{_LABEL}[.])+[A-Za-z]{{2,63}}[ \\t\\r\\n]*$"
)
"""An e-mail address as the document states it: a dot-atom local part and an ASCII host name
with a letters-only top-level domain, blanks around it (the service strips them). Every
address it matches passes Django's ``validate_email``, which also takes rarer forms (a quoted
local part, an address literal, a non-ASCII domain)."""

ONE_BODY_DESCRIPTION = (
    "Exactly one of `body` (a UTF-8 string) or `body_base64` (any bytes, standard base64); "
    "none or both is 400 `invalid_input`."
)


class MessageInSchema(OpenApiSerializerExtension):
    """``MessageInSerializer`` and its subclasses (send, half message): "exactly one of body or
    body_base64" as a ``oneOf`` of the two required sets, ``body_base64`` as ``format: byte``
    (``MessageInSerializer.validate`` refuses invalid base64), property names non-empty and
    none of ``RESERVED_PROPERTIES`` (``validate_message``), a half message's
    ``check_immunity_seconds`` within 0..``MAX_CHECK_IMMUNITY_SECONDS`` (the service's 400),
    a send's ``delay_level`` within 1..18 (400 ``illegal_delay_level``) and not with
    ``deliver_at`` (400 ``delivery_time_conflict``), and the fields a serializer declares
    only to refuse them (``refused_fields``: a half message's delivery time) left out and
    forbidden."""

    target_class = "broker.api.serializers.messages.MessageInSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's own schema plus ``oneOf`` [{required: [body]}, {required:
        [body_base64]}] (both present matches both, which ``oneOf`` refuses, as the view does)."""
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["properties"]["body_base64"].update(format="byte", pattern=BASE64_PATTERN)
            schema["oneOf"] = [{"required": ["body"]}, {"required": ["body_base64"]}]
            # validate_message: keys non-empty and not the broker's own (REAL_TOPIC, ...).
            schema["properties"]["properties"]["propertyNames"] = {
                "minLength": 1,
                "pattern": NO_NUL_PATTERN,
                "not": {"enum": sorted(RESERVED_PROPERTIES)},
            }
            if "check_immunity_seconds" in schema["properties"]:
                # Checked by the service (400 invalid_check_immunity), bounded by the rule.
                schema["properties"]["check_immunity_seconds"].update(
                    minimum=0, maximum=MAX_CHECK_IMMUNITY_SECONDS
                )
            refused = getattr(self.target, "refused_fields", ())
            for name in refused:  # 400 message_type_conflict when present
                schema["properties"].pop(name, None)
            if refused:
                schema["not"] = {"anyOf": [{"required": [name]} for name in refused]}
            elif "delay_level" in schema["properties"]:
                # Checked by the service (400 illegal_delay_level, delivery_time_conflict).
                schema["properties"]["delay_level"].update(minimum=1, maximum=len(DELAY_LEVELS_MS))
                schema["not"] = {"required": ["deliver_at", "delay_level"]}
            schema["description"] = ONE_BODY_DESCRIPTION
        return schema


class NewNameSchema(OpenApiSerializerExtension):
    """The create bodies of topics and producer and consumer groups: a ``name`` the broker keeps
    for itself is refused (400 ``system_topic``, ``broker.rules.topics.is_system_topic``; 400
    ``reserved_group``, ``RESERVED_GROUP_PREFIXES``), so the document says ``not`` those."""

    target_class = "broker.api.serializers.topology.NewNameInSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's schema, its ``name`` with ``not: {pattern: <the reserved names>}``."""
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            pattern = self.target.reserved_name_pattern
            schema["properties"]["name"]["not"] = {"pattern": pattern}
        return schema


class WholeBodyPatchSchema(OpenApiSerializerExtension):
    """``WholeBodyPatchSerializer`` and its subclasses (a producer group's ``check_url``, a
    consumer group's ``max_delivery_attempts``): the PATCH validates
    its body whole (its fields are required; a null ``check_url`` means "poll for checks"), so
    the schema must not be drf-spectacular's partial "Patched" form, in which every field is
    optional."""

    target_class = "broker.api.serializers.topology.WholeBodyPatchSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's schema as if it were not partial: its required fields stay."""
        target = self.target
        target = copy.copy(target) if isinstance(target, serializers.BaseSerializer) else target()
        target.partial = False
        return auto_schema._map_serializer(target, direction, bypass_extensions=True)


class TopicPatchSchema(OpenApiSerializerExtension):
    """``TopicPatchSerializer``: ``queue_nums``, ``message_type`` or both, as an ``anyOf`` of
    the two required sets (an empty change is refused, ``TopicPatchSerializer.validate``), and
    not drf-spectacular's partial "Patched" form."""

    target_class = "broker.api.serializers.topology.TopicPatchSerializer"

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's schema (not partial) plus ``anyOf`` [{required: [queue_nums]},
        {required: [message_type]}]."""
        target = self.target
        target = copy.copy(target) if isinstance(target, serializers.BaseSerializer) else target()
        target.partial = False
        schema = auto_schema._map_serializer(target, direction, bypass_extensions=True)
        if direction == "request":
            schema["anyOf"] = [{"required": ["queue_nums"]}, {"required": ["message_type"]}]
        return schema


class BulkPreviewInSchema(OpenApiSerializerExtension):
    """``BulkPreviewInSerializer``: exactly one of ``transaction_ids`` and ``filter``, as a
    ``oneOf`` of the two required sets (``BulkPreviewInSerializer.validate``)."""

    target_class = "broker.api.serializers.bulk.BulkPreviewInSerializer"

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's own schema plus ``oneOf`` [{required: [transaction_ids]},
        {required: [filter]}]."""
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["oneOf"] = [{"required": ["transaction_ids"]}, {"required": ["filter"]}]
        return schema


class IncidentExportInSchema(OpenApiSerializerExtension):
    """``IncidentExportInSerializer``: exactly one of ``transaction_ids``, ``stuck``,
    ``messages`` and ``audit``, as a ``oneOf`` of the four required sets."""

    target_class = "broker.api.serializers.incident_export.IncidentExportInSerializer"

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's own schema plus ``oneOf`` of each scope required alone."""
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["oneOf"] = [{"required": [name]} for name in SCOPES]
        return schema


class AlertReceiverInSchema(OpenApiSerializerExtension):
    """``AlertReceiverInSerializer``: what its ``kind`` requires
    (``receiver_target_validate``), as a ``oneOf`` by kind: a webhook kind a non-empty ``url``
    (400 ``url_required``), ``email`` 1 to ``EMAILS_MAX`` addresses (400 ``emails_required``,
    ``invalid_email``); the other kind's target field is not read. Whether a webhook URL is
    allowed (HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS, its DNS) no schema can state: 400
    ``webhook_url_not_allowed``, in the operation's description."""

    target_class = "broker.api.serializers.alert_receivers.AlertReceiverInSerializer"

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's own schema plus the ``oneOf`` of the two kinds' requirements."""
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            # const, not enum: drf-spectacular's enum hook would name a component for each.
            email = {"const": AlertReceiver.Kind.EMAIL.value}
            schema["oneOf"] = [
                {
                    "properties": {"kind": {"not": email}, "url": {"minLength": 1}},
                    "required": ["url"],
                },
                {
                    "properties": {
                        "kind": email,
                        "emails": {"minItems": 1, "items": {"pattern": EMAIL_PATTERN}},
                    },
                    "required": ["emails"],
                },
            ]
        return schema


class RequiredBodySchema(AutoSchema):
    """A view's schema whose JSON body is required though no single field is (a ``oneOf`` of
    required sets, as the incident export's): drf-spectacular marks a body required only
    when some property is, and a missing body is refused (400) as an empty one."""

    def _get_request_body(self, direction: str = "request") -> dict[str, Any] | None:
        body = super()._get_request_body(direction)
        if body is not None:
            body["required"] = True
        return body


class StrictCharFieldSchema(OpenApiSerializerFieldExtension):
    """``StrictCharField`` (every string of a request): a string without NUL, unless the
    field's own pattern (a name's, a msg_id's, which exclude NUL) says more."""

    target_class = "broker.api.serializers.fields.StrictCharField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """``{"type": "string"}`` with ``pattern`` ``NO_NUL_PATTERN`` when the field has no
        regex of its own; drf-spectacular adds the rest (lengths, its regex, nullable)."""
        schema: dict[str, Any] = {"type": "string"}
        if not any(isinstance(v, RegexValidator) for v in self.target.validators):
            schema["pattern"] = NO_NUL_PATTERN
        return schema
