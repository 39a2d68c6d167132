"""Filter expressions rendered as PostgreSQL conditions (broker.selectors.filter_sql),
evaluated by PostgreSQL over rows built inline: TRUE exactly where RocketMQ's evaluation
(``filter/.../expression``, ``ExpressionMessageFilter``) lets the message through, never an
error, never NULL."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection

from broker.rules.filters import FilterExpression, FilterType, filter_expression_parse
from broker.selectors.filter_sql import filter_condition

pytestmark = pytest.mark.django_db

ROW = "(VALUES (%(t)s::varchar, %(k)s::varchar, %(p)s::jsonb)) AS m(tags, keys, properties)"


def evaluate(expression: FilterExpression, properties=None, tags="", keys="") -> bool:
    condition = filter_condition(expression)
    assert condition is not None
    sql, params = condition
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {sql} FROM {ROW}",
            {**params, "t": tags, "k": keys, "p": json.dumps(properties or {})},
        )
        (value,) = cursor.fetchone()
    assert value is True or value is False  # never NULL
    return value


def sql92(expression: str, properties=None, tags="", keys="") -> bool:
    return evaluate(filter_expression_parse("SQL92", expression), properties, tags, keys)


@pytest.mark.parametrize(
    ("expression", "properties", "expected"),
    [
        # the example
        ("a > 5 AND b = 'x'", {"a": "6", "b": "x"}, True),
        ("a > 5 AND b = 'x'", {"a": "5", "b": "x"}, False),
        ("a > 5 AND b = 'x'", {"a": "6", "b": "y"}, False),
        ("a > 5 AND b = 'x'", {"b": "x"}, False),
        ("a > 5 AND b = 'x'", {"a": "6"}, False),
        ("a > 5 AND b = 'x'", {"a": "abc", "b": "x"}, False),
        # numbers: the property read as the literal's Java type
        ("a > 5", {"a": "7"}, True),
        ("a > 5", {"a": "5"}, False),
        ("a >= 5", {"a": "5"}, True),
        ("a < 5", {"a": "-3"}, True),
        ("a <= 5", {"a": "05"}, True),
        ("a = 5", {"a": "+5"}, True),
        ("a <> 5", {"a": "6"}, True),
        ("a <> 5", {"a": "5"}, False),
        ("5 < a", {"a": "7"}, True),
        ("a > -5", {"a": "-4"}, True),
        ("a > 5", {"a": " 6 "}, False),  # Integer.valueOf does not trim: it throws
        ("a > 5", {"a": "5.5"}, False),  # Integer.valueOf("5.5") throws
        ("a > 5.0", {"a": "5.5"}, True),
        ("a > 5.5", {"a": "5.6"}, True),
        ("a > 5.5", {"a": " 6 "}, True),  # Double.valueOf trims
        ("a > 5.5", {"a": "6d"}, True),
        ("a > 5.5", {"a": "1e5"}, True),
        ("a = 1.5", {"a": "15e-1"}, True),
        ("a > 1e3", {"a": "1e4"}, True),
        ("a > 5", {"a": "3000000000"}, False),  # no Integer: it throws
        ("a > 5000000000", {"a": "6000000000"}, True),  # a Long literal reads a Long
        ("a > 5000000000", {"a": "9223372036854775808"}, False),
        ("a > 5.5", {"a": "9223372036854775808"}, True),
        ("a > 5.5", {"a": "NaN"}, True),  # Double.compareTo: NaN above everything
        ("a < 5.5", {"a": "-Infinity"}, True),
        ("a > 5.5", {"a": "1e99999"}, True),  # infinite
        ("a < 5.5", {"a": "1e-99999"}, True),  # zero
        # a property that is no number, compared with a number: RocketMQ throws, and the
        # whole filter fails, whatever else it says
        ("a > 5", {"a": "abc"}, False),
        ("a < 5", {"a": "abc"}, False),
        ("a <> 5", {"a": "abc"}, False),
        ("NOT (a > 5)", {"a": "abc"}, False),
        ("a > 5.5", {"a": ""}, False),
        ("a = 5", {"a": ""}, False),
        ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),
        ("b = 'x' OR a > 5", {"a": "abc", "b": "x"}, True),  # OR stops at TRUE
        ("NOT (b = 'y' AND a > 5)", {"a": "abc", "b": "x"}, True),  # AND stops at FALSE
        ("NOT (a > 5 AND b = 'y')", {"a": "abc", "b": "x"}, False),
        # strings: = and <> compare them
        ("a = 'x'", {"a": "x"}, True),
        ("a = 'x'", {"a": "X"}, False),
        ("a = '5'", {"a": "05"}, False),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("a = ''", {"a": ""}, True),
        ("a <> 'x'", {"a": "y"}, True),
        ("a <> 'x'", {"a": "x"}, False),
        ("a <> 'x'", {}, False),  # NULL
        ("'x' <> a", {}, True),  # doCreateEqual: only the right null is FALSE, so <> is TRUE
        ("a = b", {"a": "x", "b": "x"}, True),
        ("a = b", {"a": "x", "b": "y"}, False),
        ("a = b", {}, True),  # both null
        ("NOT (a = b)", {"a": "x"}, True),  # only the right null: FALSE
        ("NOT (a = b)", {"b": "x"}, False),  # only the left null: NULL
        # two strings ordered: both read as doubles
        ("a > b", {"a": "10", "b": "9"}, True),
        ("a < b", {"a": "10", "b": "9"}, False),
        ("a >= b", {"a": "1.0", "b": "1"}, True),
        ("a > b", {"a": "x", "b": "1"}, False),
        ("NOT (a > b)", {"a": "1", "b": "x"}, False),
        # a missing property: NULL, and NOT NULL is NULL
        ("a > 5", {}, False),
        ("NOT (a > 5)", {}, False),
        ("a = 5", {}, False),
        ("NOT (a = 5)", {}, False),
        ("NOT (5 = a)", {}, True),  # only the right null: FALSE
        ("a > 5 OR b = 'x'", {"b": "x"}, True),
        ("a", {"a": "true"}, False),  # a property is a string, never a boolean
        ("NOT a", {"a": "true"}, True),
        ("NOT a", {}, False),
        # IS NULL
        ("a IS NULL", {}, True),
        ("a IS NULL", {"a": ""}, False),
        ("a IS NOT NULL", {"a": ""}, True),
        ("a IS NOT NULL", {}, False),
        ("(a > 5) IS NULL", {}, True),
        ("(a > 5) IS NULL", {"a": "x"}, False),  # it throws
        # BETWEEN
        ("a BETWEEN 1 AND 10", {"a": "5"}, True),
        ("a BETWEEN 1 AND 10", {"a": "1"}, True),
        ("a BETWEEN 1 AND 10", {"a": "10"}, True),
        ("a BETWEEN 1 AND 10", {"a": "11"}, False),
        ("a BETWEEN 1 AND 10", {}, False),
        ("a BETWEEN 1 AND 10", {"a": "x"}, False),
        ("NOT (a BETWEEN 1 AND 10)", {"a": "x"}, False),
        ("a BETWEEN 1.5 AND 2.5", {"a": "2"}, True),
        ("a BETWEEN -5 AND -1", {"a": "-3"}, True),
        ("a BETWEEN b AND c", {"a": "5", "b": "1", "c": "9"}, True),
        ("a NOT BETWEEN 1 AND 10", {"a": "11"}, True),
        ("a NOT BETWEEN 1 AND 10", {"a": "0"}, True),
        ("a NOT BETWEEN 1 AND 10", {"a": "5"}, False),
        ("a NOT BETWEEN 1 AND 10", {}, False),
        # IN
        ("a IN ('x', 'y')", {"a": "y"}, True),
        ("a IN ('x', 'y')", {"a": "z"}, False),
        ("a IN ('x', 'y')", {}, False),
        ("a IN ('5')", {"a": "05"}, False),
        ("a IN ('')", {"a": ""}, True),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT IN ('x', 'y')", {"a": "x"}, False),
        ("a NOT IN ('x', 'y')", {}, False),
        # TRUE and FALSE: Boolean.valueOf of the property ("true" in any case)
        ("a = TRUE", {"a": "true"}, True),
        ("a = TRUE", {"a": "TrUe"}, True),
        ("a = TRUE", {"a": "false"}, False),
        ("a = TRUE", {"a": "yes"}, False),
        ("a = TRUE", {}, False),
        ("a = FALSE", {"a": "false"}, True),
        ("a = FALSE", {"a": "no"}, True),  # anything but "true" is false
        ("a = FALSE", {"a": "true"}, False),
        ("a <> TRUE", {"a": "1"}, True),
        ("TRUE = a", {"a": "true"}, False),  # RocketMQ throws (a boolean cast to a string)
        ("NOT (TRUE = a)", {}, True),  # only the right null: FALSE
        ("TRUE", {}, True),
        ("FALSE", {}, False),
        ("NULL", {}, False),
        ("NOT NULL", {}, False),
        ("(a > 5) = TRUE", {"a": "7"}, True),
        ("(a > 5) = FALSE", {"a": "3"}, True),
        ("(a > 5) = (b > 5)", {}, True),
        ("(a > 5) = (b > 5)", {"a": "7"}, False),
        ("(a > 5) = (b > 5)", {"a": "7", "b": "8"}, True),
        ("5 = TRUE", {}, False),
        ("5 <> TRUE", {}, True),
        ("1 = 1.0", {}, True),
        ("NOT a = 1", {"a": "x"}, False),  # (NOT a) = 1: a boolean is never a number
        # CONTAINS, STARTSWITH, ENDSWITH: characters, no LIKE pattern
        ("a CONTAINS 'x'", {"a": "axb"}, True),
        ("a CONTAINS 'x'", {"a": "ab"}, False),
        ("a CONTAINS 'x'", {}, False),
        ("a NOT CONTAINS 'x'", {"a": "ab"}, True),
        ("a NOT CONTAINS 'x'", {}, False),  # a missing value: FALSE, not NULL
        ("NOT (a CONTAINS 'x')", {}, True),
        ("a CONTAINS ''", {"a": "x"}, False),
        ("a NOT CONTAINS ''", {"a": "x"}, False),
        ("a STARTSWITH 'ax'", {"a": "axb"}, True),
        ("a STARTSWITH 'ax'", {"a": "bax"}, False),
        ("a NOT STARTSWITH 'x'", {"a": "ax"}, True),
        ("a ENDSWITH 'xb'", {"a": "axb"}, True),
        ("a ENDSWITH 'xb'", {"a": "xba"}, False),
        ("a NOT ENDSWITH 'x'", {"a": "ax"}, False),
        ("a CONTAINS '%'", {"a": "abc"}, False),
        ("a CONTAINS '%'", {"a": "5%"}, True),
        ("a CONTAINS '_'", {"a": "abc"}, False),
        ("a CONTAINS '_'", {"a": "a_c"}, True),
        ("a STARTSWITH '%_'", {"a": "%_x"}, True),
        ("a STARTSWITH '%_'", {"a": "abx"}, False),
        ("a ENDSWITH '_%'", {"a": "x_%"}, True),
        ("a ENDSWITH '_%'", {"a": "xyz"}, False),
        ("a CONTAINS '\\'", {"a": "a\\b"}, True),
        ("a CONTAINS '\\'", {"a": "ab"}, False),
        ("a ENDSWITH 'é'", {"a": "café"}, True),
        ("'axb' CONTAINS 'x'", {}, True),
        ("5 CONTAINS '5'", {}, False),  # no string
    ],
)
def test_sql92_matches_where_rocketmq_does(expression, properties, expected):
    assert sql92(expression, properties) is expected


@pytest.mark.parametrize(
    ("expression", "tags", "keys", "properties", "expected"),
    [
        ("TAGS = 'TagA'", "TagA", "", {}, True),
        ("TAGS = 'TagA'", "TagB", "", {}, False),
        ("TAGS IN ('TagA', 'TagB')", "TagB", "", {}, True),
        ("TAGS = ''", "", "", {}, False),  # no tag: a missing property
        ("TAGS IS NULL", "", "", {}, True),
        ("TAGS IS NOT NULL", "x", "", {}, True),
        ("TAGS = 'x'", "", "", {"TAGS": "x"}, False),  # the column, not the properties
        ("tags = 'TagA'", "TagA", "", {}, False),  # names are case-sensitive
        ("KEYS CONTAINS 'k2'", "", "k1 k2", {}, True),
        ("KEYS = 'k1 k2'", "", "k1 k2", {}, True),
        ("KEYS IS NULL", "", "", {}, True),
        ("KEYS STARTSWITH 'k1' AND TAGS = 'T'", "T", "k1 k2", {}, True),
    ],
)
def test_tags_and_keys_are_the_columns(expression, tags, keys, properties, expected):
    assert sql92(expression, properties, tags=tags, keys=keys) is expected


@pytest.mark.parametrize(
    ("expression", "tags", "expected"),
    [
        ("A", "A", True),
        ("A", "B", False),
        ("A", "", False),  # a message without a tag never matches a tag set
        ("A || B", "B", True),
        ("A || B", "C", False),
        (" A || B ||", "A", True),
        ("A||*", "*", True),  # a "*" beside tags is a tag
        ("A||*", "C", False),
        ("a", "A", False),
    ],
)
def test_tag_filters_match_one_of_their_tags(expression, tags, expected):
    assert evaluate(filter_expression_parse("TAG", expression), tags=tags) is expected


@pytest.mark.parametrize("expression", ["*", "", "  ", "||", " * "])
def test_a_tag_filter_of_every_message_has_no_condition(expression):
    assert filter_condition(filter_expression_parse("TAG", expression)) is None


NASTY = [
    "",
    " ",
    "-",
    "+",
    ".",
    "e",
    "1e",
    "1e+",
    "--5",
    "+-5",
    "5-",
    "0x10",
    "0x1p3",
    "１",  # fullwidth
    "\u0661",
    "\x01 7 \x1f",
    "NaN",
    "-NaN",
    "nan",
    "Infinity",
    "inf",
    "1e99999",
    "-1e-99999",
    "1e400",
    "1e-400",
    "1.7976931348623159e308",
    "2.4703282292062327e-324",
    "9" * 2000,
    "0" * 200_000 + "5",
    "5" + "0" * 200_000,
    "1" + "0" * 999,
    "'; SELECT 1; --",
    "%(f0)s",
    "\\",
    "é",
]


@pytest.mark.parametrize(
    "expression",
    [
        "a > 5",
        "a = 5",
        "a < 5000000000",
        "a > 5.5",
        "a = 5.5",
        "a > b",
        "a = TRUE",
        "a BETWEEN 1 AND 2.5",
        "a CONTAINS '%'",
        "b = 'x' OR a > 5",
    ],
)
def test_no_property_value_makes_postgresql_raise(expression):
    for value in NASTY:
        sql92(expression, {"a": value, "b": value})  # an error would abort the query


def test_the_values_and_names_are_named_parameters():
    sql, params = filter_condition(
        filter_expression_parse("SQL92", "a > 5 AND b = 'secret' OR c IN ('p', 'q')")
    )
    assert params == {"f0": "a", "f1": 5, "f2": "b", "f3": "secret", "f4": "c", "f5": ["p", "q"]}
    assert "secret" not in sql and "'p'" not in sql
    assert set(re.findall(r"%\((\w+)\)s", sql)) == set(params)
    assert "%" not in re.sub(r"%\(\w+\)s", "", sql)  # every other % is escaped: there is none


def test_the_alias_and_the_prefix_are_the_callers():
    sql, params = filter_condition(
        filter_expression_parse("SQL92", "TAGS = 'x' AND p = 'y'"), alias="msg", prefix="q"
    )
    assert "msg.tags" in sql and "msg.properties ->> %(q1)s::text" in sql
    assert " m." not in sql and "(m." not in sql
    assert params == {"q0": "x", "q1": "p", "q2": "y"}
    sql, params = filter_condition(filter_expression_parse("TAG", "B || A"), alias="x", prefix="t")
    assert (sql, params) == ("(x.tags <> '' AND x.tags = ANY(%(t0)s::text[]))", {"t0": ["A", "B"]})
    # One tag by equality, so that the index message_queue_tag serves it in queue order.
    sql, params = filter_condition(filter_expression_parse("TAG", " A "), alias="x", prefix="t")
    assert (sql, params) == ("(x.tags <> '' AND x.tags = %(t0)s::text)", {"t0": "A"})


@pytest.mark.parametrize(
    ("alias", "prefix"), [("m; DROP", "f"), ("m", "f)s"), ("", "f"), ("1m", "f")]
)
def test_an_alias_or_prefix_that_is_no_sql_name_is_refused(alias, prefix):
    with pytest.raises(ValueError):
        filter_condition(FilterExpression(FilterType.TAG, "A"), alias=alias, prefix=prefix)


def test_the_sql_grows_linearly_with_the_expression():
    def size(expression: str) -> int:
        return len(filter_condition(filter_expression_parse("SQL92", expression))[0])

    chain = [size(" AND ".join(f"p{i} > {i}" for i in range(n))) for n in (10, 20, 40)]
    assert chain[2] - chain[1] < 2.2 * (chain[1] - chain[0])
    nested = ["a > 1"]
    for _ in range(20):
        nested.append(f"TRUE = (b = ({nested[-1]}))")
    sizes = [size(e) for e in nested[5::5]]
    assert sizes[-1] - sizes[-2] < 1.2 * (sizes[1] - sizes[0])
    assert sql92(nested[-1], {"a": "2", "b": "true"}) in (True, False)
