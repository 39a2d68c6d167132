"""Enumerations with labels, for the rules' vocabularies (states, answers, kinds), without
Django: members are strings (``str`` subclasses equal to their value), and the class gives
``choices`` ``[(value, label), ...]`` for model and serializer fields, as Django's
``TextChoices`` does. A member's label is the one given (``X = "x", "the label"``), else its
name with underscores as spaces, title-cased (Django's default, so the models' choices and
their migrations stay the same)."""

from __future__ import annotations

import enum
from typing import Any


def default_label(name: str) -> str:
    """A member's label when none is given: its name with underscores as spaces, title-cased
    (Django's ``ChoicesType``), e.g. ``ROLLED_BACK`` -> ``Rolled Back``."""
    return name.replace("_", " ").title()


class _ChoicesType(enum.EnumType):
    """Adds the class-level ``choices``, ``values`` and ``labels`` of Django's ``ChoicesType``."""

    @property
    def choices(cls) -> list[tuple[str, str]]:
        """``[(value, label), ...]`` in definition order."""
        return [(member.value, member.label) for member in cls]  # type: ignore[attr-defined]

    @property
    def values(cls) -> list[str]:
        """Every member's value, in definition order."""
        return [member.value for member in cls]  # type: ignore[attr-defined]

    @property
    def labels(cls) -> list[str]:
        """Every member's label, in definition order."""
        return [member.label for member in cls]  # type: ignore[attr-defined]


class TextChoices(enum.StrEnum, metaclass=_ChoicesType):
    """A string enumeration with a label per member; ``str(member)`` is its value."""

    def __new__(cls, value: str, label: str | None = None) -> TextChoices:
        member = str.__new__(cls, value)
        member._value_ = value
        member._label = label  # type: ignore[attr-defined]
        return member

    @property
    def label(self) -> str:
        """The member's human-readable label."""
        return self._label or default_label(self.name)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}.{self._name_}"

    # Templates look members up as attributes, never call the class.
    do_not_call_in_templates = enum.nonmember(True)

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list[Any]) -> str:
        return name
