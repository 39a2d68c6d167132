"""A serializer's validation of a valid JSON object, without DRF's per-field machinery.

For the serializers whose fields are all of the plain kinds the busy endpoints use
(``StrictCharField``, ``StrictIntegerField``, ``StrictBooleanField``, ``StrictChoiceField``, a
``DictField`` of ``StrictCharField``; ``broker.api.serializers.fields``), ``validation_plan``
compiles, once per serializer class, a check of each field that reads every rule from the
field itself, then calls the serializer's own ``validate``.

The plan only ever answers for data it finds valid: at the first doubt it gives up and the
caller validates the same data with DRF (``broker.api.shapes.validated``), which words the
error; tests/api/test_fast_validation.py compares the two. Why: docs/design.md, "Module
notes", broker/api/fast_validation.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinLengthValidator,
    MinValueValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import empty

from broker.api.serializers.fields import (
    CompiledRegexValidator,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
)

Plan = Callable[[dict[str, Any]], dict[str, Any] | None]
"""A compiled validation: the validated data of a JSON object, or None when the object may be
invalid (DRF then validates it and words the error)."""


class _Unsure(Exception):
    """The plan cannot vouch for a value: DRF decides."""


_UNSURE = _Unsure()

# Integers beyond this many digits are left to DRF, whose ``int(str(data))`` refuses those
# longer than Python's string conversion limit.
_INT_LIMIT = 10**18

_PLANS: dict[type[serializers.Serializer], Plan | None] = {}
_PLANS_LOCK = threading.Lock()


def validation_plan(serializer: serializers.Serializer) -> Plan | None:
    """The compiled validation of ``serializer``'s class (built on first use, kept per
    process), or None when one of its fields or rules is not of a kind the plan knows
    (nested serializers, lists, other field classes, ``validate_<field>`` methods,
    serializer-level validators, a field whose ``source`` is not its name): such a serializer
    is always validated by DRF. ``serializer`` is the process's one instance of its class
    (``broker.api.shapes``), whose ``validate`` the plan calls."""
    cls = type(serializer)
    try:
        return _PLANS[cls]
    except KeyError:
        pass
    with _PLANS_LOCK:
        if cls not in _PLANS:
            _PLANS[cls] = _compile(serializer)
        return _PLANS[cls]


def _compile(serializer: serializers.Serializer) -> Plan | None:
    """``validation_plan``'s plan for ``serializer``, or None."""
    if not isinstance(serializer, serializers.Serializer) or serializer.validators:
        return None
    checks: list[tuple[str, Callable[[Any], Any], bool, Any]] = []
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        if field.source != name or getattr(serializer, f"validate_{name}", None) is not None:
            return None
        if getattr(field.default, "requires_context", False):
            return None
        check = _field_check(field)
        if check is None:
            return None
        checks.append((name, check, field.required, field.default))
    validate = serializer.validate

    def plan(data: dict[str, Any]) -> dict[str, Any] | None:
        ret: dict[str, Any] = {}
        try:
            for name, check, required, default in checks:
                value = data.get(name, empty)
                if value is empty:
                    if required:
                        return None
                    if default is empty:
                        continue  # DRF's SkipField
                    ret[name] = default() if callable(default) else default
                else:
                    ret[name] = check(value)
            return validate(ret)
        except (_Unsure, ValidationError, DjangoValidationError):
            return None

    return plan


def _field_check(field: serializers.Field) -> Callable[[Any], Any] | None:
    """A function of a present value (not DRF's ``empty``) that returns what
    ``field.run_validation`` returns for it, or raises ``_Unsure``; None for a field of a kind
    the plan does not know."""
    kind = type(field)
    if kind is StrictCharField:
        value_check = _char_check(field)
    elif kind is StrictIntegerField:
        value_check = _integer_check(field)
    elif kind is StrictBooleanField:
        value_check = _boolean_check(field)
    elif kind is StrictChoiceField:
        value_check = _choice_check(field)
    elif kind is serializers.DictField:
        value_check = _dict_check(field)
    else:
        return None
    if value_check is None:
        return None
    allow_null = field.allow_null

    def check(value: Any) -> Any:
        if value is None:  # DRF's validate_empty_values: null, or refused
            if allow_null:
                return None
            raise _UNSURE
        return value_check(value)

    return check


def _validators_check(field: serializers.Field) -> Callable[[Any], None] | None:
    """``field.run_validators`` as one function raising ``_Unsure`` instead of a validation
    error; the validators Halfmoon's fields use are evaluated from their own limits and
    patterns, any other is called as DRF calls it."""
    tests: list[Callable[[Any], bool]] = []
    for validator in field.validators:
        kind = type(validator)
        if kind in (MaxLengthValidator, MinLengthValidator, MaxValueValidator, MinValueValidator):
            if callable(validator.limit_value):
                return None
            tests.append(_limit_test(validator))
        elif kind is ProhibitNullCharactersValidator:
            tests.append(lambda value: "\x00" not in value)
        elif kind in (CompiledRegexValidator, RegexValidator):
            tests.append(_regex_test(validator))
        elif getattr(validator, "requires_context", False):
            return None
        else:
            tests.append(_call_test(validator))

    def run(value: Any) -> None:
        for test in tests:
            if not test(value):
                raise _UNSURE

    return run


def _limit_test(validator: Any) -> Callable[[Any], bool]:
    """Django's ``BaseValidator.__call__``: ``compare(clean(value), limit_value)`` refuses."""
    clean, compare, limit = validator.clean, validator.compare, validator.limit_value
    return lambda value: not compare(clean(value), limit)


def _regex_test(validator: RegexValidator) -> Callable[[Any], bool]:
    """Django's ``RegexValidator.__call__``: a match, or no match with ``inverse_match``."""
    regex, inverse = validator.regex, validator.inverse_match
    return lambda value: bool(regex.search(str(value))) is not inverse


def _call_test(validator: Callable[[Any], None]) -> Callable[[Any], bool]:
    """Any other validator, called: refusing is raising a validation error."""

    def test(value: Any) -> bool:
        try:
            validator(value)
        except (ValidationError, DjangoValidationError):
            return False
        return True

    return test


def _char_check(field: StrictCharField) -> Callable[[Any], Any] | None:
    """``StrictCharField.run_validation`` of a non-null value: a str (else ``invalid``);
    ``""`` (or only whitespace when trimmed) is returned as ``""`` without validators if blank
    is allowed, else refused; no lone surrogate; then the validators."""
    validators = _validators_check(field)
    if validators is None:
        return None
    allow_blank, trim = field.allow_blank, field.trim_whitespace

    def check(value: Any) -> str:
        if type(value) is not str:
            raise _UNSURE
        if trim:
            value = value.strip()
        if value == "":
            if allow_blank:
                return ""
            raise _UNSURE
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _UNSURE from None
        validators(value)
        return value

    return check


def _integer_check(field: StrictIntegerField) -> Callable[[Any], Any] | None:
    """``StrictIntegerField.run_validation`` of a non-null value: an int, or a float with no
    fraction (as an int); not a bool; then the validators (min and max value)."""
    validators = _validators_check(field)
    if validators is None:
        return None

    def check(value: Any) -> int:
        if type(value) is float and value.is_integer():
            value = int(value)
        if type(value) is not int or not -_INT_LIMIT < value < _INT_LIMIT:
            raise _UNSURE
        validators(value)
        return value

    return check


def _boolean_check(field: StrictBooleanField) -> Callable[[Any], Any] | None:
    """``StrictBooleanField.run_validation`` of a non-null value: JSON true or false."""
    validators = _validators_check(field)
    if validators is None:
        return None

    def check(value: Any) -> bool:
        if type(value) is not bool:
            raise _UNSURE
        validators(value)
        return value

    return check


def _choice_check(field: StrictChoiceField) -> Callable[[Any], Any] | None:
    """``ChoiceField.run_validation`` of a non-null value: one of the choices' strings, as its
    value; then the validators."""
    validators = _validators_check(field)
    if validators is None:
        return None
    choices = field.choice_strings_to_values

    def check(value: Any) -> Any:
        if type(value) is not str or value == "" or value not in choices:
            raise _UNSURE
        value = choices[value]
        validators(value)
        return value

    return check


def _dict_check(field: serializers.DictField) -> Callable[[Any], Any] | None:
    """``DictField.run_validation`` of a non-null value: a JSON object (not empty unless
    allowed) whose every value its child (a ``StrictCharField``) validates; then the
    validators."""
    child = field.child
    if type(child) is not StrictCharField:
        return None
    child_check = _field_check(child)
    validators = _validators_check(field)
    if child_check is None or validators is None:
        return None
    allow_empty = field.allow_empty

    def check(value: Any) -> dict[str, Any]:
        if type(value) is not dict or (not allow_empty and not value):
            raise _UNSURE
        result = {str(key): child_check(item) for key, item in value.items()}
        validators(result)
        return result

    return check
