"""Fields and validators shared by the API's serializers: strict types (no coercion of a
string to a number or a boolean), names and msg ids by their patterns."""

from __future__ import annotations

import re
from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers
from rest_framework.utils import html
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from broker.constants import MSG_ID_PATTERN, NAME_PATTERN
from broker.services.operations.audit import REASON_MAX_LENGTH


class CompiledRegexValidator(RegexValidator):
    """Django's ``RegexValidator`` with its pattern compiled when it is made: Django keeps it as
    a lazy object, and every match then goes through the proxy, while the validators of names
    and msg_ids run for every item of a batch. Same arguments, messages, codes and equality as
    Django's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.regex = re.compile(self.regex.pattern, self.regex.flags)


name_validator = CompiledRegexValidator(
    NAME_PATTERN,
    "Must match ^[%%|a-zA-Z0-9_-]{1,127}$.",
    code="invalid_name",  # %% : message % params
)

msg_id_validator = CompiledRegexValidator(
    MSG_ID_PATTERN, "1-64 characters of A-Z a-z 0-9 _ . : -", code="invalid_msg_id"
)


class _EmptyQueryValueMixin:
    """An empty query parameter (``?topic=``) is the empty string, not DRF's "omitted": a
    field that may not be blank refuses it (400) rather than ignoring it."""

    field_name: str

    def get_value(self, dictionary: Any) -> Any:
        if html.is_html_input(dictionary) and dictionary.get(self.field_name) == "":
            return ""
        return super().get_value(dictionary)  # type: ignore[misc]


class StrictChoiceField(_EmptyQueryValueMixin, serializers.ChoiceField):
    """DRF's ``ChoiceField`` (only the listed strings) where an empty query value is refused."""


class StrictCharField(_EmptyQueryValueMixin, serializers.CharField):
    """A string field that takes only a JSON string (a number, boolean, array or object is
    400 ``invalid``: "Not a valid string.") and keeps it as sent (no trimming of
    whitespace, unless ``trim_whitespace=True``); otherwise DRF's ``CharField``.

    A lone surrogate is refused as DRF's ``ProhibitSurrogateCharactersValidator`` refuses it
    (400 ``surrogate_characters_not_allowed``, naming the first one), found by the UTF-8
    encoder instead of a Python loop over every character of the body."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitSurrogateCharactersValidator)
        ]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value = super().to_internal_value(data)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            validator = ProhibitSurrogateCharactersValidator
            message = validator.message.format(code_point=ord(value[exc.start]))
            raise serializers.ValidationError(message, code=validator.code) from None
        return value


class QueryIntegerField(_EmptyQueryValueMixin, serializers.IntegerField):
    """An integer query parameter: DRF's ``IntegerField`` (the string "5" is 5, min and max
    as DRF's) where an empty value (``?limit=``) is refused (400 ``invalid``: "A valid integer
    is required."), not read as left out."""


class StrictURLField(serializers.URLField):
    """``URLField`` (http, https, ftp, ftps per Django's validator) that takes only a JSON
    string, as ``StrictCharField``."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer field of a JSON body that takes only a JSON integer (as JSON Schema counts
    them: 5 or 5.0): a string ("5"), a fraction (5.5) or a boolean is 400 ``invalid`` ("A
    valid integer is required."); min and max as DRF's ``IntegerField``."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A boolean field that takes only JSON ``true`` or ``false`` (DRF's also takes "yes", 1,
    "on" and the like): anything else is 400 ``invalid`` ("Must be a valid boolean.")."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


def NameField(**kwargs: Any) -> serializers.CharField:  # noqa: N802 - a field factory
    """A topic or group name: a JSON string matching api-v1's ``^[%|a-zA-Z0-9_-]{1,127}$``."""
    return StrictCharField(max_length=127, validators=[name_validator], **kwargs)


WHITESPACE_CLASS = (
    r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""The characters ``str.strip()`` removes, as a regex character class's contents. A pattern of
the OpenAPI document names them instead of ``\\s``, which means other characters to JSON
Schema (ECMA-262's: no U+001C-U+001F or U+0085, but U+FEFF) than to Python."""

REASON_HELP = "Why (required, not blank): kept in the audit log with the access key's name."


REASON_PATTERN = rf"^[^\u0000]*[^{WHITESPACE_CLASS}\u0000][^\u0000]*$"
"""A reason with some character ``str.strip()`` keeps, and no NUL."""


def ReasonField(**kwargs: Any) -> serializers.CharField:  # noqa: N802 - a field factory
    """An operator's ``reason`` as the OpenAPI document states it: required, not blank (some
    character besides whitespace: the service's ``reason_required``), no NUL, at most
    ``REASON_MAX_LENGTH`` characters."""
    kwargs.setdefault("help_text", REASON_HELP)
    return StrictCharField(
        max_length=REASON_MAX_LENGTH,
        validators=[CompiledRegexValidator(REASON_PATTERN, code="blank")],
        **kwargs,
    )


def ReasonInputField(**kwargs: Any) -> serializers.CharField:  # noqa: N802 - a field factory
    """An operator's ``reason`` as a view validates it: a string of at most
    ``REASON_MAX_LENGTH`` characters, or missing, null or blank, which pass through to the
    service, the one place that answers 400 ``reason_required`` for all three (the schema's
    serializer declares the field required where the service requires it)."""
    return StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=REASON_MAX_LENGTH,
        **kwargs,
    )
