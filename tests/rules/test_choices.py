"""The rules' Django-free ``TextChoices`` (``broker.rules.choices``): members are their string
values, and the class gives the ``choices``, ``values`` and ``labels`` Django's ``TextChoices``
gives, so the models' fields and migrations read the same."""

from __future__ import annotations

import enum

from django.db import models

from broker.rules.choices import TextChoices, default_label


class Colour(TextChoices):
    DARK_RED = "dark_red"
    LIGHT_BLUE = "light_blue", "Sky"
    GREEN = enum.auto()


class DjangoColour(models.TextChoices):
    DARK_RED = "dark_red"
    LIGHT_BLUE = "light_blue", "Sky"
    GREEN = enum.auto()


def test_a_member_is_its_string_value():
    assert Colour.DARK_RED == "dark_red"
    assert str(Colour.DARK_RED) == "dark_red"
    assert f"{Colour.LIGHT_BLUE}" == "light_blue"
    assert Colour("dark_red") is Colour.DARK_RED
    assert Colour.DARK_RED.value == "dark_red"


def test_an_auto_value_is_the_members_name():
    assert Colour.GREEN == "GREEN"


def test_a_label_is_the_one_given_else_the_name_title_cased():
    assert Colour.LIGHT_BLUE.label == "Sky"
    assert Colour.DARK_RED.label == "Dark Red"
    assert default_label("ROLLED_BACK") == "Rolled Back"
    assert default_label("near_check_max") == "Near Check Max"


def test_the_class_lists_choices_values_and_labels_in_definition_order():
    assert Colour.choices == [("dark_red", "Dark Red"), ("light_blue", "Sky"), ("GREEN", "Green")]
    assert Colour.values == ["dark_red", "light_blue", "GREEN"]
    assert Colour.labels == ["Dark Red", "Sky", "Green"]


def test_choices_read_as_djangos_text_choices_read():
    assert Colour.choices == DjangoColour.choices
    assert Colour.values == DjangoColour.values
    assert Colour.labels == DjangoColour.labels
    assert [m.label for m in Colour] == [m.label for m in DjangoColour]


def test_a_member_reprs_as_its_qualified_name():
    assert repr(Colour.DARK_RED) == "Colour.DARK_RED"


def test_templates_look_members_up_and_never_call_the_class():
    assert Colour.do_not_call_in_templates is True
    assert "do_not_call_in_templates" not in Colour.__members__
