"""Consumer filter expressions (broker.rules.filters, broker.rules.sql92): TAG sets as RocketMQ's
FilterAPI builds them, and SQL92 trees, precedence and refusals as RocketMQ's SelectorParser
has them, each refusal with its exact position and reason."""

import pytest

from broker.rules.filters import (
    FilterExpression,
    FilterExpressionError,
    FilterType,
    filter_expression_parse,
    sql92_parse,
    tag_set,
)
from broker.rules.sql92 import (
    And,
    Between,
    BooleanLiteral,
    Comparison,
    FloatLiteral,
    In,
    IntegerLiteral,
    IsNull,
    Negate,
    Not,
    NullLiteral,
    Or,
    Property,
    StringLiteral,
    StringMatch,
)

a, b, c = Property("a"), Property("b"), Property("c")
ONE, TWO, FIVE = IntegerLiteral(1), IntegerLiteral(2), IntegerLiteral(5)
TRUE, FALSE, NULL = BooleanLiteral(True), BooleanLiteral(False), NullLiteral()


def eq(left, right):
    return Comparison("=", left, right)


# --- TAG ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "tags"),
    [
        ("*", None),
        ("", None),
        ("  ", None),
        (" * ", None),
        ("\t*\n", None),
        ("\x00*\x20", None),  # Java's trim: every character up to the space
        ("||", None),  # no tag left: an empty set, which RocketMQ lets everything through
        (" || || ", None),
        ("A", {"A"}),
        ("A || B", {"A", "B"}),
        ("A||B", {"A", "B"}),
        (" A||B ||", {"A", "B"}),
        ("||A", {"A"}),
        ("A || A", {"A"}),
        ("A||*", {"A", "*"}),  # "*" beside a tag is a literal tag
        ("**", {"**"}),
        ("A|B", {"A|B"}),
        ("A|||B", {"A", "|B"}),
        ("A B", {"A B"}),
        ("\x01A\x1f", {"A"}),
        ("!A!", {"!A!"}),  # '!' is the first character Java's trim keeps
        ('"A"', {'"A"'}),
        ("\u00a0A", {"\u00a0A"}),  # a no-break space is no Java whitespace
        ("a || A", {"a", "A"}),  # tags are case-sensitive
    ],
)
def test_tag_set_is_rocketmq_build_subscription_data(expression, tags):
    assert tag_set(expression) == (None if tags is None else frozenset(tags))


@pytest.mark.parametrize(
    ("type", "expression", "matches_all"),
    [
        (FilterType.TAG, "*", True),
        (FilterType.TAG, "", True),
        (FilterType.TAG, "||", True),
        (FilterType.TAG, "A", False),
        (FilterType.TAG, "A || *", False),
        (FilterType.SQL92, "", False),  # only a TAG expression matches all
        (FilterType.SQL92, "TRUE", False),
    ],
)
def test_matches_all(type, expression, matches_all):
    assert FilterExpression(type, expression).matches_all is matches_all


def test_filter_types_are_rocketmq_expression_types():
    assert [t.value for t in FilterType] == ["TAG", "SQL92"]
    assert FilterType("TAG") is FilterType.TAG and FilterType("SQL92") is FilterType.SQL92
    assert FilterType.TAG == "TAG" and FilterType.SQL92 == "SQL92"


@pytest.mark.parametrize("expression", ["", "*", " A || B ", "a > ", "(", "'"])
def test_any_tag_expression_is_kept_as_given(expression):
    parsed = filter_expression_parse("TAG", expression)
    assert parsed == FilterExpression(FilterType.TAG, expression)
    assert type(parsed.type) is FilterType


def test_a_sql92_expression_is_checked_and_kept_as_given():
    parsed = filter_expression_parse("SQL92", " a > 5 ")
    assert parsed == FilterExpression(FilterType.SQL92, " a > 5 ")
    assert parsed.type is FilterType.SQL92
    with pytest.raises(FilterExpressionError) as refused:
        filter_expression_parse("SQL92", "a >")
    assert (refused.value.position, refused.value.reason) == (4, "expected a value after '>'")
    with pytest.raises(FilterExpressionError) as empty:
        filter_expression_parse("SQL92", "")
    assert (empty.value.position, empty.value.reason) == (1, "the expression is empty")


@pytest.mark.parametrize("kind", ["tag", "sql92", "SQL", "", " TAG", "TAG ", "XPATH"])
def test_an_unknown_type_is_refused_at_no_position(kind):
    with pytest.raises(FilterExpressionError) as refused:
        filter_expression_parse(kind, "*")
    error = refused.value
    assert (error.expression, error.position) == ("*", 0)
    assert error.reason == f"unknown filter type '{kind}' (TAG or SQL92)"
    assert str(error) == f"Illegal filter expression: unknown filter type '{kind}' (TAG or SQL92)"


def test_the_error_reads_as_a_sentence_and_is_a_value_error():
    with pytest.raises(ValueError) as refused:
        sql92_parse("a > 5 AND b >")
    error = refused.value
    assert isinstance(error, FilterExpressionError)
    assert (error.expression, error.position) == ("a > 5 AND b >", 14)
    assert error.reason == "expected a value after '>'"
    assert (
        str(error) == "Illegal SQL92 filter expression at position 14: expected a value after '>'"
    )


# --- SQL92: what parses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "tree"),
    [
        # comparisons
        ("a = 1", eq(a, ONE)),
        ("a <> 1", Comparison("<>", a, ONE)),
        ("a > 1", Comparison(">", a, ONE)),
        ("a >= 1", Comparison(">=", a, ONE)),
        ("a < 1", Comparison("<", a, ONE)),
        ("a <= 1", Comparison("<=", a, ONE)),
        ("a=1", eq(a, ONE)),
        ("a<>1", Comparison("<>", a, ONE)),
        ("a>=1", Comparison(">=", a, ONE)),
        ("a<=1", Comparison("<=", a, ONE)),
        ("a = b", eq(a, b)),
        ("a <= now", Comparison("<=", a, Property("now"))),
        ("5 = a", eq(FIVE, a)),  # a literal on the left: the grammar's unaryExpr both sides
        ("5 < a", Comparison("<", FIVE, a)),
        ("'x' = a", eq(StringLiteral("x"), a)),
        ("'x' = 'x'", eq(StringLiteral("x"), StringLiteral("x"))),
        ("1 = 1.0", eq(ONE, FloatLiteral(1.0))),
        # strings
        ("a = 'x'", eq(a, StringLiteral("x"))),
        ("a = ''", eq(a, StringLiteral(""))),
        ("a = 'it''s'", eq(a, StringLiteral("it's"))),
        ("a = ''''", eq(a, StringLiteral("'"))),
        ("a = '''x'''", eq(a, StringLiteral("'x'"))),
        ("a = 'x y\nz'", eq(a, StringLiteral("x y\nz"))),
        ("a = '%_\\'", eq(a, StringLiteral("%_\\"))),
        ("a = 'AND'", eq(a, StringLiteral("AND"))),
        # integers: a Java Integer or Long, the L suffix dropped
        ("a = 0", eq(a, IntegerLiteral(0))),
        ("a = 10", eq(a, IntegerLiteral(10))),
        ("a = 5L", eq(a, FIVE)),
        ("a = 5l", eq(a, FIVE)),
        ("a = 2147483648", eq(a, IntegerLiteral(2147483648))),
        ("a = 9223372036854775807", eq(a, IntegerLiteral(9223372036854775807))),
        ("a = 9223372036854775807L", eq(a, IntegerLiteral(9223372036854775807))),
        # floats
        ("a > 5.5", Comparison(">", a, FloatLiteral(5.5))),
        ("a > 5.", Comparison(">", a, FloatLiteral(5.0))),
        ("a > .5", Comparison(">", a, FloatLiteral(0.5))),
        ("a > 5E10", Comparison(">", a, FloatLiteral(5e10))),
        ("a > 5e10", Comparison(">", a, FloatLiteral(5e10))),
        ("a > 1e-3", Comparison(">", a, FloatLiteral(0.001))),
        ("a > 1.5E+2", Comparison(">", a, FloatLiteral(150.0))),
        ("a > 5.e1", Comparison(">", a, FloatLiteral(50.0))),
        ("a > .5e1", Comparison(">", a, FloatLiteral(5.0))),
        ("a > 0.5", Comparison(">", a, FloatLiteral(0.5))),
        ("a > 4.9e-324", Comparison(">", a, FloatLiteral(5e-324))),  # Double.MIN_VALUE
        ("a > 1.7976931348623157e308", Comparison(">", a, FloatLiteral(1.7976931348623157e308))),
        # signs: '-' negates, '+' vanishes
        ("a > -5", Comparison(">", a, Negate(FIVE))),
        ("a > - 5.5", Comparison(">", a, Negate(FloatLiteral(5.5)))),
        ("a > +5", Comparison(">", a, FIVE)),
        ("a > - -5", Comparison(">", a, Negate(Negate(FIVE)))),
        ("a > -+5", Comparison(">", a, Negate(FIVE))),
        ("a>-5", Comparison(">", a, Negate(FIVE))),
        ("-a > 5", Comparison(">", Negate(a), FIVE)),
        ("-'x' > 5", Comparison(">", Negate(StringLiteral("x")), FIVE)),
        ("-(a > 1) = TRUE", eq(Negate(Comparison(">", a, ONE)), TRUE)),
        # booleans and NULL
        ("a = TRUE", eq(a, TRUE)),
        ("a = false", eq(a, FALSE)),
        ("a = True", eq(a, TRUE)),
        ("TRUE = a", eq(TRUE, a)),
        ("TRUE = FALSE", eq(TRUE, FALSE)),
        ("5 = TRUE", eq(FIVE, TRUE)),
        ("TRUE = -5", eq(TRUE, Negate(FIVE))),  # a negation is no constant
        ("TRUE", TRUE),
        ("false", FALSE),
        ("NULL", NULL),
        ("NOT NULL", Not(NULL)),
        ("a", a),  # a property where a condition goes: RocketMQ casts it
        # identifiers: [a-zA-Z_$][a-zA-Z0-9_$]*, case kept, keywords only when whole
        ("_a$1 = 1", eq(Property("_a$1"), ONE)),
        ("$ = 1", eq(Property("$"), ONE)),
        ("A_b = 1", eq(Property("A_b"), ONE)),
        ("Zz9 = 1", eq(Property("Zz9"), ONE)),
        ("nullx = 1", eq(Property("nullx"), ONE)),
        ("ANDY = 1", eq(Property("ANDY"), ONE)),
        ("innot = 1", eq(Property("innot"), ONE)),
        ("TAGS = 'x'", eq(Property("TAGS"), StringLiteral("x"))),
        ("X = 1", eq(Property("X"), ONE)),
        # IS NULL
        ("a IS NULL", IsNull(a, False)),
        ("a IS NOT NULL", IsNull(a, True)),
        ("a is not null", IsNull(a, True)),
        ("a IS NULL IS NULL", IsNull(IsNull(a, False), False)),
        ("5 IS NULL", IsNull(FIVE, False)),
        ("(a > 1) IS NOT NULL", IsNull(Comparison(">", a, ONE), True)),
        # BETWEEN
        ("a BETWEEN 1 AND 2", Between(a, ONE, TWO, False)),
        ("a NOT BETWEEN 1 AND 2", Between(a, ONE, TWO, True)),
        ("a BETWEEN 1 AND 1", Between(a, ONE, ONE, False)),
        ("a BETWEEN 1 AND 2.0", Between(a, ONE, FloatLiteral(2.0), False)),
        ("a BETWEEN b AND c", Between(a, b, c, False)),
        ("a BETWEEN -5 AND -10", Between(a, Negate(FIVE), Negate(IntegerLiteral(10)), False)),
        ("a NOT BETWEEN 2 AND 1", Between(a, TWO, ONE, True)),  # createNotBetween: no check
        # the bounds compare as doubles when one is a float (__compare): 2^53 + 3 -> 2^53 + 4
        (
            "a BETWEEN 9007199254740996.0 AND 9007199254740995",
            Between(a, FloatLiteral(9007199254740996.0), IntegerLiteral(9007199254740995), False),
        ),
        (
            "a BETWEEN 9007199254740993 AND 9007199254740992.0",
            Between(a, IntegerLiteral(9007199254740993), FloatLiteral(9007199254740992.0), False),
        ),
        # IN
        ("a IN ('x')", In(a, ("x",), False)),
        ("a IN ('x', 'y')", In(a, ("x", "y"), False)),
        ("a NOT IN ('x','y','x')", In(a, ("x", "y", "x"), True)),
        ("(a) IN ('x')", In(a, ("x",), False)),
        ("+a IN ('')", In(a, ("",), False)),
        # CONTAINS, STARTSWITH, ENDSWITH
        ("a CONTAINS 'x'", StringMatch("CONTAINS", a, "x", False)),
        ("a NOT CONTAINS 'x'", StringMatch("CONTAINS", a, "x", True)),
        ("a STARTSWITH 'x'", StringMatch("STARTSWITH", a, "x", False)),
        ("a NOT STARTSWITH 'x'", StringMatch("STARTSWITH", a, "x", True)),
        ("a ENDSWITH 'x'", StringMatch("ENDSWITH", a, "x", False)),
        ("a NOT ENDSWITH 'x'", StringMatch("ENDSWITH", a, "x", True)),
        ("a contains ''", StringMatch("CONTAINS", a, "", False)),
        ("'axb' contains 'x'", StringMatch("CONTAINS", StringLiteral("axb"), "x", False)),
        ("5 CONTAINS '5'", StringMatch("CONTAINS", FIVE, "5", False)),
        ("a CONTAINS '%_'", StringMatch("CONTAINS", a, "%_", False)),
        (
            "a CONTAINS 'x' ENDSWITH 'y'",
            StringMatch("ENDSWITH", StringMatch("CONTAINS", a, "x", False), "y", False),
        ),
        # NOT binds tighter than any comparison (unaryExpr)
        ("NOT a", Not(a)),
        ("NOT (a > 5)", Not(Comparison(">", a, FIVE))),
        ("NOT NOT a", Not(Not(a))),
        ("NOT TRUE", Not(TRUE)),
        ("NOT a = 1", eq(Not(a), ONE)),
        ("NOT a IS NULL", IsNull(Not(a), False)),
        # AND over OR, both left-associative; comparisons over both
        ("a = 1 OR b = 2 AND c = 5", Or(eq(a, ONE), And(eq(b, TWO), eq(c, FIVE)))),
        ("a = 1 AND b = 2 OR c = 5", Or(And(eq(a, ONE), eq(b, TWO)), eq(c, FIVE))),
        ("(a = 1 OR b = 2) AND c = 5", And(Or(eq(a, ONE), eq(b, TWO)), eq(c, FIVE))),
        ("a AND b AND c", And(And(a, b), c)),
        ("a OR b OR c", Or(Or(a, b), c)),
        ("a and b or c", Or(And(a, b), c)),
        ("a = 1 AND b", And(eq(a, ONE), b)),
        ("NOT a AND b", And(Not(a), b)),
        ("((a))", a),
        # = and <> bind looser than > and the like, and repeat
        ("a = b > c", eq(a, Comparison(">", b, c))),
        ("a > 1 = TRUE", eq(Comparison(">", a, ONE), TRUE)),
        ("a = 1 = 2", eq(eq(a, ONE), TWO)),
        ("a <> 1 = FALSE", eq(Comparison("<>", a, ONE), FALSE)),
        ("a IS NULL = TRUE", eq(IsNull(a, False), TRUE)),
        ("a = 1 IS NULL", IsNull(eq(a, ONE), False)),
        ("a BETWEEN 1 AND 2 = TRUE", eq(Between(a, ONE, TWO, False), TRUE)),
        ("a BETWEEN 1 AND 2 AND b", And(Between(a, ONE, TWO, False), b)),
        ("a IN ('x') = FALSE", eq(In(a, ("x",), False), FALSE)),
        # whitespace and comments
        ("  a = 1  ", eq(a, ONE)),
        ("a\t=\n1\r\f", eq(a, ONE)),
        ("a = 1 -- note\nOR b = 2", Or(eq(a, ONE), eq(b, TWO))),
        ("a = 1 --\rOR b = 2", Or(eq(a, ONE), eq(b, TWO))),
        ("a = 1 -- x -- y\r\nOR b = 2", Or(eq(a, ONE), eq(b, TWO))),
        ("/* c */ a /* d */ = 1", eq(a, ONE)),
        ("a = /** x **/ 1", eq(a, ONE)),
        ("a = 1 /*/ */", eq(a, ONE)),
        ("a =/* * / */1", eq(a, ONE)),
        ("a = 1/**/", eq(a, ONE)),
        ("a = 1 -- end\n", eq(a, ONE)),
        # keywords in any case
        ("a iS nOt NuLl", IsNull(a, True)),
        ("a Between 1 aNd 2", Between(a, ONE, TWO, False)),
        ("a NoT In ('x')", In(a, ("x",), True)),
        ("a cOnTaInS 'x'", StringMatch("CONTAINS", a, "x", False)),
        ("a StartsWith 'x'", StringMatch("STARTSWITH", a, "x", False)),
        ("a not endsWITH 'x'", StringMatch("ENDSWITH", a, "x", True)),
        ("a = 1 oR b = 2", Or(eq(a, ONE), eq(b, TWO))),
        ("tRuE", TRUE),
        ("FaLsE", FALSE),
        ("nUlL", NULL),
        ("nOt a", Not(a)),
        # the issue's example
        ("a > 5 AND b = 'x'", And(Comparison(">", a, FIVE), eq(b, StringLiteral("x")))),
    ],
)
def test_sql92_parses_as_rocketmq_selector_parser(expression, tree):
    assert sql92_parse(expression) == tree


# --- SQL92: what is refused, where and why ---------------------------------------------------

LAST_WORDS = "expected IN, BETWEEN, CONTAINS, STARTSWITH or ENDSWITH after 'NOT'"


@pytest.mark.parametrize(
    ("expression", "position", "reason"),
    [
        # nothing there
        ("", 1, "the expression is empty"),
        ("   ", 4, "the expression is empty"),
        ("-- c\n", 6, "the expression is empty"),
        ("/* */", 6, "the expression is empty"),
        # a value missing
        ("a >", 4, "expected a value after '>'"),
        ("a > 5 AND", 10, "expected a value after 'AND'"),
        ("a > 5 and ", 11, "expected a value after 'and'"),
        ("a = 1 AND OR b = 2", 11, "expected a value after 'AND'"),
        ("a = 1 OR", 9, "expected a value after 'OR'"),
        ("a =", 4, "expected a value after '='"),
        ("a <> ", 6, "expected a value after '<>'"),
        ("NOT", 4, "expected a value after 'NOT'"),
        ("-", 2, "expected a value after '-'"),
        ("a > +", 6, "expected a value after '+'"),
        ("()", 2, "expected a value after '('"),
        (")", 1, "expected a value"),
        ("AND a", 1, "expected a value"),
        ("= 1", 1, "expected a value"),
        ("a > --5\n", 9, "expected a value after '>'"),  # "--" starts a comment
        ("a > ) @", 5, "expected a value after '>'"),  # read from the left: ')' before '@'
        # parentheses
        ("(a = 1", 7, "expected ')' after '1' to close the '(' at position 1"),
        ("((a = 1)", 9, "expected ')' after ')' to close the '(' at position 1"),
        (
            "a = 1 AND (b = 2 OR (c = 5)",
            28,
            "expected ')' after ')' to close the '(' at position 11",
        ),
        ("(a = 'x'", 9, "expected ')' after 'x' to close the '(' at position 1"),
        # strings, comments, characters
        ("a = 'x", 5, "unterminated string"),
        ("a = 'x''", 8, "unterminated string"),  # 'x' is a string, then a quote opens one
        ("'", 1, "unterminated string"),
        ("a = 1 /* x", 7, "unterminated comment"),
        ("a = 1 /* x *", 7, "unterminated comment"),
        ("a.b = 1", 2, "unexpected character '.'"),
        ("a = .", 5, "unexpected character '.'"),
        ("a != 1", 3, "unexpected character '!'"),
        ("a == 1", 4, "expected a value after '='"),
        ("a / 2 = 1", 3, "unexpected character '/'"),
        ("a = 1 @", 7, "unexpected character '@'"),
        ("a = 'x' @", 9, "unexpected character '@'"),
        ("a \v= 1", 3, "unexpected character '\v'"),
        ("é = 1", 1, "unexpected character 'é'"),
        ("a = \u0661", 5, "unexpected character '\u0661'"),
        ('a = "x"', 5, "unexpected character '\"'"),
        ("a[1] = 1", 2, "unexpected character '['"),
        # left over after a whole expression (RocketMQ ignores it; refused here)
        ("a = 1 b", 7, "unexpected 'b'"),
        ("a = 1 b = 2", 7, "unexpected 'b'"),
        ("a = 1)", 6, "unexpected ')'"),
        ("a = 1 --", 7, "unexpected '-'"),  # a line comment needs its newline
        ("a = 1 -- c", 7, "unexpected '-'"),
        ("a = 05", 6, "unexpected '5'"),
        ("a = 0L", 6, "unexpected 'L'"),
        ("a = 5E", 6, "unexpected 'E'"),
        ("a = 5.5L", 8, "unexpected 'L'"),
        ("a = 1.5.5", 8, "unexpected '.5'"),
        ("a = 1, 2", 6, "unexpected ','"),
        ("a = 'x' 'y'", 9, "unexpected ''y''"),
        ("a NOT x", 7, LAST_WORDS),
        ("a NOT", 6, LAST_WORDS),
        ("a not = 1", 7, "expected IN, BETWEEN, CONTAINS, STARTSWITH or ENDSWITH after 'not'"),
        # IS
        ("a IS", 5, "expected NULL or NOT NULL after 'IS'"),
        ("a IS 5", 6, "expected NULL or NOT NULL after 'IS'"),
        ("a is x", 6, "expected NULL or NOT NULL after 'is'"),
        ("a IS NOT", 9, "expected NULL after 'NOT'"),
        ("a IS NOT TRUE", 10, "expected NULL after 'NOT'"),
        # BETWEEN
        ("a BETWEEN 1", 12, "expected AND after '1'"),
        ("a BETWEEN 1 OR 2", 13, "expected AND after '1'"),
        ("a BETWEEN", 10, "expected a value after 'BETWEEN'"),
        ("a BETWEEN 1 AND", 16, "expected a value after 'AND'"),
        ("a NOT BETWEEN 1 and", 20, "expected a value after 'and'"),
        ("a BETWEEN 2 AND 1", 11, "BETWEEN's lower bound 2 is above its upper bound 1"),
        ("a BETWEEN 2.5 AND 1", 11, "BETWEEN's lower bound 2.5 is above its upper bound 1"),
        ("a BETWEEN 2 AND 1.5", 11, "BETWEEN's lower bound 2 is above its upper bound 1.5"),
        ("a between (2) and 1", 11, "BETWEEN's lower bound 2 is above its upper bound 1"),
        (
            "a BETWEEN 9007199254740996.0 AND 9007199254740993",
            11,
            "BETWEEN's lower bound 9007199254740996.0 is above its upper bound 9007199254740993",
        ),
        (
            "a BETWEEN 9007199254740993 AND 9007199254740992",  # two Longs: compared exactly
            11,
            "BETWEEN's lower bound 9007199254740993 is above its upper bound 9007199254740992",
        ),
        ("a BETWEEN 'x' AND 'y'", 11, "cannot compare a string with 'BETWEEN'"),
        ("'x' BETWEEN 1 AND 2", 1, "cannot compare a string with 'BETWEEN'"),
        ("a BETWEEN 1 AND TRUE", 17, "cannot compare TRUE with 'BETWEEN'"),
        ("a NOT BETWEEN NULL AND 1", 15, "cannot compare NULL with 'BETWEEN'"),
        ("(a = 1) BETWEEN 1 AND 2", 1, "cannot compare a condition with 'BETWEEN'"),
        # > >= < <=: numbers and properties only (checkLessThanOperand)
        ("a > 'x'", 5, "cannot compare a string with '>'"),
        ("'5' < a", 1, "cannot compare a string with '<'"),
        ("a >= TRUE", 6, "cannot compare TRUE with '>='"),
        ("a <= FALSE", 6, "cannot compare FALSE with '<='"),
        ("a > NULL", 5, "cannot compare NULL with '>'"),
        ("(a = 1) > 5", 1, "cannot compare a condition with '>'"),
        ("NOT a > 5", 1, "cannot compare a condition with '>'"),
        ("a > (b > 1)", 5, "cannot compare a condition with '>'"),
        ("a > b < c", 1, "cannot compare a condition with '<'"),
        ("a < b IN ('x')", 1, "IN needs a property on its left"),
        ("a > 'x' AND b", 5, "cannot compare a string with '>'"),
        # = <>: no NULL (checkEqualOperand), no boolean constant with another constant
        ("a = NULL", 5, "cannot compare NULL with '=' (use IS NULL)"),
        ("NULL <> a", 1, "cannot compare NULL with '<>' (use IS NULL)"),
        ("NULL = NULL", 1, "cannot compare NULL with '=' (use IS NULL)"),
        ("TRUE = 5", 1, "cannot compare TRUE with a number"),
        ("FALSE = 5.5", 1, "cannot compare FALSE with a number"),
        ("TRUE = 'x'", 1, "cannot compare TRUE with a string"),
        ("a = 1 AND TRUE <> 1", 11, "cannot compare TRUE with a number"),
        # IN: a property, then strings
        ("a IN (1)", 7, "expected a string after '('"),
        ("a IN ()", 7, "expected a string after '('"),
        ("a IN 'x'", 6, "expected '(' after 'IN'"),
        ("a IN", 5, "expected '(' after 'IN'"),
        ("a IN ('x',)", 11, "expected a string after ','"),
        ("a IN ('x' 'y')", 11, "expected ',' or ')' after 'x'"),
        ("a IN ('x'", 10, "expected ',' or ')' after 'x'"),
        ("'x' IN ('a')", 1, "IN needs a property on its left"),
        ("-a NOT IN ('a')", 1, "NOT IN needs a property on its left"),
        ("(a = 1) IN ('a')", 1, "IN needs a property on its left"),
        ("NOT a IN ('a')", 1, "IN needs a property on its left"),  # (NOT a) IN ...
        # CONTAINS, STARTSWITH, ENDSWITH take a string
        ("a CONTAINS x", 12, "expected a string after 'CONTAINS'"),
        ("a not startswith 5", 18, "expected a string after 'startswith'"),
        ("a ENDSWITH", 11, "expected a string after 'ENDSWITH'"),
        ("a NOT CONTAINS (x)", 16, "expected a string after 'CONTAINS'"),
        # a value where a condition goes (asBooleanExpression)
        ("'x'", 1, "expected a condition, not a value"),
        ("5", 1, "expected a condition, not a value"),
        ("-a", 1, "expected a condition, not a value"),
        ("(5)", 1, "expected a condition, not a value"),
        ("a = 1 AND 5", 11, "expected a condition, not a value"),
        ("5 OR a = 1", 1, "expected a condition, not a value"),
        ("a OR 'x'", 6, "expected a condition, not a value"),
        ("'x' AND a", 1, "expected a condition, not a value"),
        ("NOT 'x'", 5, "expected a condition, not a value"),
        ("NOT -a", 5, "expected a condition, not a value"),
        ("a = 1 OR 1.5", 10, "expected a condition, not a value"),
        # literals out of RocketMQ's range (createFromDecimal, createFloat)
        ("a > 9223372036854775808", 5, "integer 9223372036854775808 is out of range"),
        ("a > 9223372036854775808L", 5, "integer 9223372036854775808L is out of range"),
        ("a > 100000000000000000000000", 5, "integer 100000000000000000000000 is out of range"),
        ("a > -9223372036854775808", 6, "integer 9223372036854775808 is out of range"),
        ("a > 0.0", 5, "float 0.0 is zero or out of range"),
        ("a > .0", 5, "float .0 is zero or out of range"),
        ("a > 0e5", 5, "float 0e5 is zero or out of range"),
        ("a > 2e-324", 5, "float 2e-324 is zero or out of range"),
        ("a > 1e400", 5, "float 1e400 is zero or out of range"),
        ("a > 1.8e308", 5, "float 1.8e308 is zero or out of range"),
    ],
)
def test_sql92_refusals_say_where_and_why(expression, position, reason):
    with pytest.raises(FilterExpressionError) as refused:
        sql92_parse(expression)
    error = refused.value
    assert (error.position, error.reason) == (position, reason)
    assert error.expression == expression
    assert str(error) == f"Illegal SQL92 filter expression at position {position}: {reason}"


@pytest.mark.parametrize("space", [" ", "\t", "\n", "\r", "\f"])
def test_each_whitespace_of_the_grammar_separates_tokens(space):
    assert sql92_parse(f"{space}a{space}>{space}5{space}") == Comparison(">", a, FIVE)
    assert sql92_parse(f"a{space}IS{space}NOT{space}NULL") == IsNull(a, True)
