"""A consumer's filter expression (``broker.rules.filters``) as a PostgreSQL condition over the
commit log's columns: TRUE exactly where RocketMQ's filter lets the message through.

TAG: the message's one tag is in the set (RocketMQ ``FilterUtils.isTagMatched``). SQL92: the
tree of ``broker.rules.sql92`` evaluated as RocketMQ's ``filter/.../expression`` classes do
(``ComparisonExpression``, ``LogicExpression``, ``UnaryExpression``) over properties that are
strings or missing (``MessageEvaluationContext``); ``ExpressionMessageFilter`` lets a message
through only when that gives TRUE without throwing. Each condition renders as its outcome, an
integer: FALSE, TRUE, UNKNOWN (Java's null) or ERROR (the evaluation throws: a property that
is no number compared with a number, ``TRUE = 'x'``), combined as Java's short-circuits do, so
the SQL grows linearly with the expression. No cast ever raises in PostgreSQL (each is behind
a regex in a CASE), and values go as named parameters, never in the SQL text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.rules import sql92 as q
from broker.rules.filters import FilterExpression, FilterType, sql92_parse, tag_set

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
STRING, INT, LONG, DOUBLE = "text", "int", "long", "double"  # the Java types of values
BOOL, NULL, CODE = "bool", "null", "code"  # NULL: always null; CODE: a condition's outcome
NUMERIC = (INT, LONG, DOUBLE)
INT_MIN, INT_MAX, LONG_MIN, LONG_MAX = -(2**31), 2**31 - 1, -(2**63), 2**63 - 1  # Java's ranges
FALSE, TRUE, UNKNOWN, ERROR = "0", "1", "2", "3"  # a condition's outcome: its SQL is one of these
_NOT = "(ARRAY[1, 0, 2, 3])[{} + 1]"
_AND = "(ARRAY[0, 0, 0, 0, 0, 1, 2, 3, 0, 2, 2, 3, 3, 3, 3, 3])[{} * 4 + {} + 1]"
_OR = "(ARRAY[0, 1, 2, 3, 1, 1, 1, 1, 2, 1, 2, 3, 3, 3, 3, 3])[{} * 4 + {} + 1]"
_EQUAL = "(ARRAY[1, 0, 0, 3, 0, 1, 0, 3, 2, 2, 1, 3, 3, 3, 3, 3])[{} * 4 + {} + 1]"
_INTEGER = "'^[+-]?[0-9]+$'"  # Integer.valueOf / Long.valueOf (ASCII digits)
_TRIM = r"[\x01-\x20]*"  # String.trim, as Double.valueOf does
_MANTISSA = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)"
_NUMBER = rf"{_MANTISSA}(?:[eE][+-]?[0-9]+)?"
_DOUBLE = f"'^{_TRIM}{_NUMBER}[fFdD]?{_TRIM}$'"  # Double.valueOf's decimal form
_DOUBLE_NUMBER = f"'^{_TRIM}({_NUMBER})'"
_DOUBLE_HUGE = "'[eE][+-]?0*[1-9][0-9]{4}'"  # five exponent digits or more: beyond any double
_DOUBLE_ZERO = f"'^{_TRIM}[+-]?[0.]*[eE]'"
_DOUBLE_SPECIAL = f"'^{_TRIM}[+-]?(?:NaN|Infinity){_TRIM}$'"
_DOUBLE_LONGEST = 1000  # characters: beyond, a value is no number here (numeric's range)
# Half-way past the largest double and to the smallest, to 40 digits (rounded inwards): beyond,
# Java's rounding gives infinity and zero, and PostgreSQL's float8 input refuses the value.
_DOUBLE_OVER = "1.797693134862315807937289714053034150799E+308"
_DOUBLE_UNDER = "2.470328229206232720882843964341106861826E-324"


@dataclass(frozen=True)
class _Term:
    """A rendered operand. A value: SQL of its Java ``type`` (NULL where the Java value is null,
    ``nullable`` when it may be), with ``error``, the SQL condition under which evaluating it
    throws (only a NULL-typed ``-(condition)`` has one). A condition (type CODE): SQL giving
    its outcome, FALSE, TRUE, UNKNOWN (Java's null) or ERROR (it throws), never NULL."""

    sql: str
    type: str
    nullable: bool = False
    error: str | None = None


def _case(arms: list[tuple[str, str]], default: str) -> str:
    """``CASE WHEN .. THEN .. ELSE default END``, the constant conditions folded."""
    kept = []
    for condition, value in arms:
        if condition == "true":
            if not kept:
                return value
            default = value
            break
        if condition != "false":
            kept.append(f"WHEN {condition} THEN {value}")
    return f"(CASE {' '.join(kept)} ELSE {default} END)" if kept else default


def _is_null(term: _Term) -> str:
    return "true" if term.type == NULL else f"{term.sql} IS NULL" if term.nullable else "false"


def _outcome(test: str) -> str:
    """The outcome of a SQL boolean that is NULL only where a conversion threw."""
    return f"COALESCE((CASE {test} WHEN true THEN {TRUE} WHEN false THEN {FALSE} END), {ERROR})"


def _java_integer(text: str, long: bool) -> str:
    """Integer.valueOf / Long.valueOf of a string as bigint, NULL when it throws (and for the
    other Unicode digits Java also reads)."""
    digits, low, high = (19, LONG_MIN, LONG_MAX) if long else (10, INT_MIN, INT_MAX)
    number = f"({text})::numeric"
    in_range = f"(CASE WHEN {number} BETWEEN {low} AND {high} THEN {number}::bigint END)"
    short = f"char_length(ltrim(ltrim({text}, '+-'), '0')) <= {digits}"
    return f"(CASE WHEN {text} ~ {_INTEGER} THEN (CASE WHEN {short} THEN {in_range} END) END)"


def _double(value: str, order: int = 1) -> str:
    """A Java double as ``float8[]`` ``{value, order}``: arrays compare element by element, so
    -0.0 (order 0) sorts below 0.0 and differs from it, as Double.compareTo and equals have it;
    NaN is above every other value and equal to itself in both."""
    return f"ARRAY[{value}, {order}]::float8[]"


def _java_double(text: str) -> str:
    """Double.valueOf of a string (``_double``), NULL when it throws (and for Java's hexadecimal
    form or a value longer than 1000 characters); beyond the double range a value is infinite
    or zero, as Java rounds it (the sign read from the text: numeric has no -0)."""
    n = f"substring({text} FROM {_DOUBLE_NUMBER})::numeric"
    negative = f"{text} ~ '^{_TRIM}-'"
    infinite = _double(f"(CASE WHEN {negative} THEN '-Infinity' ELSE 'Infinity' END)::float8")
    zero = _double("0", f"(CASE WHEN {negative} THEN 0 ELSE 1 END)")
    finite = _case(
        [(f"abs({n}) >= {_DOUBLE_OVER}", infinite), (f"abs({n}) <= {_DOUBLE_UNDER}", zero)],
        _double(f"{n}::float8"),
    )
    huge = _case([(f"{text} ~ {_DOUBLE_ZERO} OR {text} ~ '[eE]-'", zero)], infinite)
    decimal = _case([(f"{text} ~ {_DOUBLE_HUGE}", huge)], finite)
    special = _case([(f"{text} ~ 'NaN'", _double("'NaN'::float8"))], infinite)
    guarded = f"(CASE WHEN {text} ~ {_DOUBLE} THEN {decimal} END)"
    short = f"char_length({text}) <= {_DOUBLE_LONGEST}"
    return f"(CASE WHEN {text} ~ {_DOUBLE_SPECIAL} THEN {special} WHEN {short} THEN {guarded} END)"


def _convert(term: _Term, to: str) -> str:
    """The value as ``to`` (ComparisonExpression.__compare's conversions), NULL when it throws."""
    if term.type == STRING and to != STRING:
        if to == BOOL:  # Boolean.valueOf: "true" in any case, anything else is false
            return f"({term.sql} ~ '^[Tt][Rr][Uu][Ee]$')"
        return _java_double(term.sql) if to == DOUBLE else _java_integer(term.sql, to == LONG)
    return _double(f"({term.sql})::float8") if to == DOUBLE else term.sql


def _compare(op: str, left: _Term, right: _Term) -> str:
    """The outcome of ``left op right``, both values not null (ComparisonExpression.__compare;
    ``>`` and the like between two strings compare their Double.valueOf): ERROR where RocketMQ
    throws (a string that does not convert; ``=`` between a boolean and a string)."""
    types = (left.type, right.type)
    if op == "=" and BOOL in types and types != (BOOL, BOOL):
        if types == (BOOL, STRING):  # ClassCastException: (String) lv
            return ERROR
        if types == (STRING, BOOL):
            return _outcome(f"{_convert(left, BOOL)} = {right.sql}")
        return FALSE  # a boolean and a number: __compare answers -1
    if types == (STRING, STRING) and op != "=":
        to = DOUBLE
    elif STRING in types and types != (STRING, STRING):
        to = right.type if left.type == STRING else left.type
    else:
        to = DOUBLE if DOUBLE in types else left.type
    return _outcome(f"{_convert(left, to)} {op} {_convert(right, to)}")


class _Renderer:
    def __init__(self, alias: str, prefix: str) -> None:
        self.alias, self.prefix = alias, prefix
        self.params: dict[str, object] = {}
        self.names: dict[str, str] = {}  # a property's name -> its parameter

    def param(self, value: object, cast: str) -> str:
        name = f"{self.prefix}{len(self.params)}"
        self.params[name] = value
        return f"%({name})s::{cast}"

    def term(self, node: q.Sql92) -> _Term:
        """A value, or a condition's outcome (type CODE)."""
        if isinstance(node, q.Property):
            column = {"TAGS": "tags", "KEYS": "keys"}.get(node.name)
            if column is not None:  # RocketMQ's TAGS and KEYS properties are columns here
                return _Term(f"NULLIF({self.alias}.{column}, '')", STRING, True)
            if node.name not in self.names:
                self.names[node.name] = self.param(node.name, "text")
            return _Term(f"({self.alias}.properties ->> {self.names[node.name]})", STRING, True)
        if isinstance(node, q.StringLiteral):
            return _Term(self.param(node.value, "text"), STRING)
        if isinstance(node, q.IntegerLiteral):
            long = not INT_MIN <= node.value <= INT_MAX
            return _Term(self.param(node.value, "bigint"), LONG if long else INT)
        if isinstance(node, q.FloatLiteral):
            return _Term(self.param(node.value, "float8"), DOUBLE)
        if isinstance(node, q.BooleanLiteral):
            return _Term("true" if node.value else "false", BOOL)
        if isinstance(node, q.NullLiteral):
            return _Term("NULL", NULL, True)
        if isinstance(node, q.Negate):
            inner = self.term(node.operand)
            if inner.type in NUMERIC:  # Java keeps the number's class
                return _Term(f"(-{inner.sql})", inner.type)
            error = f"{inner.sql} = {ERROR}" if inner.type == CODE else inner.error
            return _Term("NULL", NULL, True, error)
        return _Term(self.code(node), CODE)

    def code(self, node: q.Sql92) -> str:
        """A condition's outcome (asBooleanExpression: a property is cast, a string is never a
        boolean, so it gives FALSE, or UNKNOWN when missing)."""
        if isinstance(node, q.BooleanLiteral | q.NullLiteral):
            return {True: TRUE, False: FALSE, None: UNKNOWN}[getattr(node, "value", None)]
        if isinstance(node, q.Property):
            return f"(CASE WHEN {self.term(node).sql} IS NULL THEN {UNKNOWN} ELSE {FALSE} END)"
        if not isinstance(node, q.CONDITIONS):
            raise ValueError(f"not a condition: {node}")  # sql92_parse refuses it
        if isinstance(node, q.Not):
            return _NOT.format(self.code(node.operand))
        if isinstance(node, q.And | q.Or):
            table = _AND if isinstance(node, q.And) else _OR
            return table.format(self.code(node.left), self.code(node.right))
        if isinstance(node, q.Comparison):
            left, right = self.term(node.left), self.term(node.right)
            if node.op not in ("=", "<>"):
                return self.ordered(node.op, left, right)
            equal = self.equal(left, right)
            return equal if node.op == "=" else _NOT.format(equal)
        if isinstance(node, q.IsNull):
            value = self.term(node.operand)
            yes, no = (FALSE, TRUE) if node.negated else (TRUE, FALSE)
            if value.type == CODE:
                arms = f"WHEN {ERROR} THEN {ERROR} WHEN {UNKNOWN} THEN {yes}"
                return f"(CASE {value.sql} {arms} ELSE {no} END)"
            return _case([(value.error or "false", ERROR), (_is_null(value), yes)], no)
        if isinstance(node, q.Between):
            return self.between(node)
        if isinstance(node, q.In):
            value = self.term(node.property)
            test = f"{value.sql} = ANY({self.param(list(node.values), 'text[]')})"
            return _case(
                [
                    (f"{value.sql} IS NULL", UNKNOWN),
                    (f"NOT ({test})" if node.negated else test, TRUE),
                ],
                FALSE,
            )
        assert isinstance(node, q.StringMatch), node
        return self.string_match(node)

    def between(self, node: q.Between) -> str:
        """``v BETWEEN a AND b`` is ``v >= a AND v <= b``, NOT BETWEEN ``v < a OR v > b``
        (ComparisonExpression.createBetween, createNotBetween)."""
        value = self.term(node.operand)
        if value.type == NULL:  # v >= a: null (a is not evaluated), so both sides are
            return _case([(value.error or "false", ERROR)], UNKNOWN)
        (low_op, high_op), table = (("<", ">"), _OR) if node.negated else ((">=", "<="), _AND)
        low = self.ordered(low_op, value, self.term(node.low))
        return table.format(low, self.ordered(high_op, value, self.term(node.high)))

    def string_match(self, node: q.StringMatch) -> str:
        """ComparisonExpression.ContainsExpression and the like: FALSE for an empty search (the
        operand is not evaluated), for a missing value and for a value that is no string."""
        if node.search == "":
            return FALSE
        value = self.term(node.operand)
        if value.type == CODE:
            return f"(CASE {value.sql} WHEN {ERROR} THEN {ERROR} ELSE {FALSE} END)"
        if value.type != STRING:
            return _case([(value.error or "false", ERROR)], FALSE)
        search = self.param(node.search, "text")
        test = {
            "CONTAINS": f"strpos({value.sql}, {search}) > 0",
            "STARTSWITH": f"starts_with({value.sql}, {search})",
            "ENDSWITH": f"right({value.sql}, char_length({search})) = {search}",
        }[node.op]
        test = f"NOT ({test})" if node.negated else test
        return f"(CASE WHEN COALESCE({test}, false) THEN {TRUE} ELSE {FALSE} END)"

    def ordered(self, op: str, left: _Term, right: _Term) -> str:
        """``>``, ``>=``, ``<``, ``<=`` of two values (ComparisonExpression.evaluate): UNKNOWN
        when the left is null, without evaluating the right, or when the right is null."""
        arms = [(left.error or "false", ERROR), (_is_null(left), UNKNOWN)]
        arms += [(right.error or "false", ERROR), (_is_null(right), UNKNOWN)]
        return _case(arms, "NULL" if NULL in (left.type, right.type) else _compare(op, left, right))

    def equal(self, left: _Term, right: _Term) -> str:
        """``=`` (ComparisonExpression.doCreateEqual): both sides evaluated, then TRUE when both
        are null, UNKNOWN when only the left is, FALSE when only the right is, else __compare.
        A condition's SQL is written once (a simple CASE evaluates its subject once)."""
        if left.type == CODE and right.type == CODE:
            return _EQUAL.format(left.sql, right.sql)
        if CODE in (left.type, right.type):
            subject, other = (left, right) if left.type == CODE else (right, left)
            bare = _Term(other.sql, other.type, other.nullable)  # its error is tested once, first
            outcomes = {}
            for outcome, constant in ((TRUE, "true"), (FALSE, "false"), (UNKNOWN, None)):
                known = _Term(constant, BOOL) if constant else _Term("NULL", NULL, True)
                outcomes[outcome] = self.equal(
                    *((known, bare) if subject is left else (bare, known))
                )
            arms = " ".join(f"WHEN {outcome} THEN {sql}" for outcome, sql in outcomes.items())
            return _case(
                [(other.error or "false", ERROR)], f"(CASE {subject.sql} {arms} ELSE {ERROR} END)"
            )
        compared = ERROR if NULL in (left.type, right.type) else _compare("=", left, right)
        arms = [(left.error or "false", ERROR), (right.error or "false", ERROR)]
        left_null = _case([(_is_null(right), TRUE)], UNKNOWN)
        arms += [(_is_null(left), left_null), (_is_null(right), FALSE)]
        return _case(arms, compared)


def filter_condition(
    expression: FilterExpression, *, alias: str = "m", prefix: str = "f"
) -> tuple[str, dict[str, object]] | None:
    """``(sql, params)``: a boolean SQL expression over ``{alias}.tags`` (varchar, '' for no
    tag), ``{alias}.keys`` (varchar, keys separated by a space) and ``{alias}.properties``
    (jsonb object of strings), TRUE exactly where RocketMQ lets the message through, never
    NULL; ``params`` holds its named psycopg parameters ``%(f0)s``, ``%(f1)s``... (``prefix``,
    then a number; property names are parameters too). None when the expression matches every
    message. In SQL92, the properties ``TAGS`` and ``KEYS`` read the columns (their '' is a
    missing property); a comparison with a number reads a property as Java's Integer.valueOf,
    Long.valueOf or Double.valueOf does, by the literal's type; CONTAINS, STARTSWITH and
    ENDSWITH compare characters (no LIKE pattern). The SQL grows linearly with the expression."""
    if not (_NAME.match(alias) and _NAME.match(prefix)):
        raise ValueError(f"alias and prefix must be SQL names: {alias!r}, {prefix!r}")
    renderer = _Renderer(alias, prefix)
    if expression.type == FilterType.TAG:
        tags = tag_set(expression.expression)
        if tags is None:
            return None
        # Plain column tests (tags is NOT NULL), so a receive reads the index message_queue_tag
        # (whose predicate, tags <> '', is repeated for a generic plan to use it): one tag by
        # equality, in queue order.
        if len(tags) == 1:
            test = f"{alias}.tags = {renderer.param(next(iter(tags)), 'text')}"
        else:
            test = f"{alias}.tags = ANY({renderer.param(sorted(tags), 'text[]')})"
        return f"({alias}.tags <> '' AND {test})", renderer.params
    outcome = renderer.code(sql92_parse(expression.expression))
    return f"COALESCE({outcome} = {TRUE}, false)", renderer.params
