"""RocketMQ's SQL92 filter expressions parsed into a tree of frozen dataclasses: the grammar of
``filter/.../parser/SelectorParser.jj``, with the checks of ``ComparisonExpression``,
``ConstantExpression.createFromDecimal/createFloat`` and ``asBooleanExpression``. No database.

Identifiers are ``[a-zA-Z_$][a-zA-Z0-9_$]*`` (no '.'); keywords are case-insensitive; ``--``
comments end at a newline, ``/* */`` too. Precedence, loosest first: OR, AND, ``=``/``<>``/IS,
``>``/``>=``/``<``/``<=``/BETWEEN/IN/CONTAINS/STARTSWITH/ENDSWITH, then prefix ``+``, ``-`` and
NOT, so ``NOT a > 5`` is ``(NOT a) > 5``, refused (a condition is not ordered): write
``NOT (a > 5)``. One divergence: RocketMQ's parser stops after the first complete expression and
ignores the rest (``a = 1 b`` is ``a = 1``); here anything left over is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Union

_LOGIC_WORDS = {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"}
KEYWORDS = frozenset(_LOGIC_WORDS | {"CONTAINS", "STARTSWITH", "ENDSWITH"})
LONG_MAX = 2**63 - 1  # createFromDecimal's Long (an Integer when it fits one)
DOUBLE_MIN, DOUBLE_MAX = 5e-324, 1.7976931348623157e308  # createFloat refuses floats outside


class FilterExpressionError(ValueError):
    """A filter expression refused: ``position`` is the 1-based character where the problem is
    (one past the last character for an unexpected end; 0 when it is about no place, e.g. an
    unknown filter type), ``reason`` says what is wrong."""

    def __init__(self, expression: str, position: int, reason: str) -> None:
        self.expression, self.position, self.reason = expression, position, reason
        where = f" at position {position}" if position else ""
        super().__init__(
            f"Illegal {'SQL92 ' if position else ''}filter expression{where}: {reason}"
        )


# The tree. Values: Property, the literals, Negate; every other node is a condition.
@dataclass(frozen=True)
class Property:
    name: str  # case-sensitive; the value is a string, or missing


@dataclass(frozen=True)
class StringLiteral:
    value: str


@dataclass(frozen=True)
class IntegerLiteral:
    value: int  # a Java Integer when it fits one, else a Long (createFromDecimal)


@dataclass(frozen=True)
class FloatLiteral:
    value: float


@dataclass(frozen=True)
class BooleanLiteral:
    value: bool


@dataclass(frozen=True)
class NullLiteral:
    pass


@dataclass(frozen=True)
class Negate:
    operand: Sql92  # the negated number; NULL when the operand is no number


@dataclass(frozen=True)
class Comparison:
    op: Literal["=", "<>", ">", ">=", "<", "<="]
    left: Sql92
    right: Sql92


@dataclass(frozen=True)
class IsNull:
    operand: Sql92
    negated: bool


@dataclass(frozen=True)
class Between:
    operand: Sql92
    low: Sql92
    high: Sql92
    negated: bool


@dataclass(frozen=True)
class In:
    property: Property
    values: tuple[str, ...]
    negated: bool


@dataclass(frozen=True)
class StringMatch:
    op: Literal["CONTAINS", "STARTSWITH", "ENDSWITH"]
    operand: Sql92
    search: str
    negated: bool


@dataclass(frozen=True)
class Not:
    operand: Sql92


@dataclass(frozen=True)
class And:
    left: Sql92
    right: Sql92


@dataclass(frozen=True)
class Or:
    left: Sql92
    right: Sql92


NUMBERS = (IntegerLiteral, FloatLiteral)
CONDITIONS = (Comparison, IsNull, Between, In, StringMatch, Not, And, Or, BooleanLiteral)
CONDITIONS += (NullLiteral,)
"""RocketMQ's BooleanExpressions (TRUE, FALSE and NULL are BooleanConstantExpressions)."""
Sql92 = Union[Property, StringLiteral, IntegerLiteral, FloatLiteral, Negate, *CONDITIONS]


@dataclass(frozen=True)
class _Token:
    kind: Literal["ID", "KEYWORD", "STRING", "INT", "FLOAT", "OP", "END"]
    position: int  # 1-based
    text: str = ""  # as written (a keyword upper-cased, a string decoded)
    source: str = ""  # as written


_SPACE = " \t\n\r\f"
_ID = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_EXP = r"[eE][+-]?[0-9]+"
_FLOAT = re.compile(rf"[0-9]+\.[0-9]*(?:{_EXP})?|\.[0-9]+(?:{_EXP})?|[0-9]+{_EXP}")
_STRING = re.compile(r"'(?:[^']|'')*'")
_LINE_COMMENT = re.compile(r"--[^\n\r]*[\n\r]")
_BLOCK_COMMENT = re.compile(r"/\*[^*]*\*+(?:[^*/][^*]*\*+)*/")
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")


def _describe(node: Sql92) -> str:
    """How a refused operand is named in a reason."""
    if isinstance(node, BooleanLiteral | NullLiteral):
        return {True: "TRUE", False: "FALSE", None: "NULL"}[getattr(node, "value", None)]
    kinds = {StringLiteral: "a string", IntegerLiteral: "a number", FloatLiteral: "a number"}
    return kinds.get(type(node), "a condition")


class _Parser:
    """Recursive descent over SelectorParser.jj's productions; tokens are read as needed, so the
    first problem from the left is the one reported."""

    def __init__(self, expression: str) -> None:
        self.text = expression
        self.at = 0  # the lexer's index in text
        self.tokens: list[_Token] = []
        self.index = 0  # the parser's index in tokens
        self.previous: _Token | None = None

    def fail(self, position: int, reason: str) -> FilterExpressionError:
        return FilterExpressionError(self.text, position, reason)

    def lex(self) -> _Token:
        text, n = self.text, len(self.text)
        while self.at < n:
            if text[self.at] in _SPACE:
                self.at += 1
            elif comment := _LINE_COMMENT.match(text, self.at) or _BLOCK_COMMENT.match(
                text, self.at
            ):
                self.at = comment.end()
            else:
                break
        start, char = self.at, text[self.at : self.at + 1]
        if start == n:
            return _Token("END", n + 1)
        if match := _ID.match(text, start):
            word = match.group()
            token = _Token("KEYWORD", start + 1, word.upper(), word)
            if word.upper() not in KEYWORDS:
                token = _Token("ID", start + 1, word, word)
        elif match := _FLOAT.match(text, start):  # longer than a DECIMAL_LITERAL there
            token = _Token("FLOAT", start + 1, match.group(), match.group())
        elif match := _DECIMAL.match(text, start):
            token = _Token("INT", start + 1, match.group(), match.group())
        elif match := _STRING.match(text, start):
            token = _Token(
                "STRING", start + 1, match.group()[1:-1].replace("''", "'"), match.group()
            )
        elif char == "'" or text.startswith("/*", start):
            unclosed = "string" if char == "'" else "comment"
            raise self.fail(start + 1, f"unterminated {unclosed}")
        elif operator := next((op for op in _OPERATORS if text.startswith(op, start)), None):
            token = _Token("OP", start + 1, operator, operator)
        else:
            raise self.fail(start + 1, f"unexpected character '{char}'")
        self.at = start + len(token.source)
        return token

    def peek(self, ahead: int = 0) -> _Token:
        while len(self.tokens) <= self.index + ahead:
            self.tokens.append(self.lex())  # END again and again at the end
        return self.tokens[self.index + ahead]

    def take(self, count: int = 1) -> _Token:
        for _ in range(count):
            self.previous = self.peek()
            self.index += 1
        return self.previous  # type: ignore[return-value]

    def at_word(self, *words: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind in ("KEYWORD", "OP") and token.text in words

    def accept(self, word: str) -> bool:
        if self.at_word(word):
            self.take()
            return True
        return False

    def expected(self, what: str, tail: str = "") -> FilterExpressionError:
        after = ""
        if self.previous is not None:
            s = self.previous.source
            after = f" after {s}" if s[0] == "'" else f" after '{s}'"
        return self.fail(self.peek().position, f"expected {what}{after}{tail}")

    def condition(self, node: Sql92, position: int) -> Sql92:
        """SelectorParser.asBooleanExpression: a condition, or a property (a boolean cast)."""
        if isinstance(node, (*CONDITIONS, Property)):
            return node
        raise self.fail(position, "expected a condition, not a value")

    def parse(self) -> Sql92:
        position = self.peek().position
        if self.peek().kind == "END":
            raise self.fail(position, "the expression is empty")
        node = self.logic("OR")
        if self.peek().kind != "END":
            raise self.fail(self.peek().position, f"unexpected '{self.peek().source}'")
        return self.condition(node, position)

    def logic(self, word: str) -> Sql92:
        """orExpression (word OR) over andExpression (word AND) over equalityExpression."""
        operand = (lambda: self.logic("AND")) if word == "OR" else self.equality
        position = self.peek().position
        left = operand()
        while self.accept(word):
            right_position = self.peek().position
            right = self.condition(operand(), right_position)
            left = (Or if word == "OR" else And)(self.condition(left, position), right)
        return left

    def equality(self) -> Sql92:
        position = self.peek().position
        left = self.comparison()
        while True:
            if self.at_word("=", "<>"):
                op, right_position = self.take().text, self.peek().position
                right = self.comparison()
                self.check_equal(op, left, position, right, right_position)
                left = Comparison(op, left, right)  # type: ignore[arg-type]
            elif self.accept("IS"):
                negated = self.accept("NOT")
                if not self.accept("NULL"):
                    raise self.expected("NULL" if negated else "NULL or NOT NULL")
                left = IsNull(left, negated)
            else:
                return left

    def check_equal(self, op: str, left: Sql92, position: int, right: Sql92, at: int) -> None:
        """ComparisonExpression.checkEqualOperand and checkEqualOperandCompatability."""
        for node, where in ((left, position), (right, at)):
            if isinstance(node, NullLiteral):
                raise self.fail(where, f"cannot compare NULL with '{op}' (use IS NULL)")
        if isinstance(left, BooleanLiteral) and isinstance(right, (StringLiteral, *NUMBERS)):
            raise self.fail(position, f"cannot compare {_describe(left)} with {_describe(right)}")

    def check_ordered(self, op: str, node: Sql92, position: int) -> None:
        """ComparisonExpression.checkLessThanOperand: only numbers and properties are ordered."""
        if isinstance(node, (*CONDITIONS, StringLiteral)):
            raise self.fail(position, f"cannot compare {_describe(node)} with '{op}'")

    def comparison(self) -> Sql92:
        position = self.peek().position
        left = self.unary()
        while True:
            negated = self.at_word("NOT")
            if self.at_word(">", ">=", "<", "<="):
                op, right_position = self.take().text, self.peek().position
                right = self.unary()
                self.check_ordered(op, left, position)
                self.check_ordered(op, right, right_position)
                left = Comparison(op, left, right)  # type: ignore[arg-type]
            elif self.at_word("CONTAINS", "STARTSWITH", "ENDSWITH", ahead=int(negated)):
                op = self.take(1 + negated).text
                left = StringMatch(op, left, self.string(), negated)  # type: ignore[arg-type]
            elif self.at_word("BETWEEN", ahead=int(negated)):
                self.take(1 + negated)
                left = self.between(left, position, negated)
            elif self.at_word("IN", ahead=int(negated)):
                self.take(1 + negated)
                if not isinstance(left, Property):
                    raise self.fail(
                        position, f"{'NOT IN' if negated else 'IN'} needs a property on its left"
                    )
                left = In(left, self.string_list(), negated)
            elif negated:
                self.take()
                raise self.expected("IN, BETWEEN, CONTAINS, STARTSWITH or ENDSWITH")
            else:
                return left

    def between(self, operand: Sql92, position: int, negated: bool) -> Sql92:
        """createBetween checks the bounds' order when both are literals; createNotBetween not."""
        low_position = self.peek().position
        low = self.unary()
        if not self.accept("AND"):
            raise self.expected("AND")
        high_position = self.peek().position
        high = self.unary()
        for node, where in ((operand, position), (low, low_position), (high, high_position)):
            self.check_ordered("BETWEEN", node, where)
        if not negated and isinstance(low, NUMBERS) and isinstance(high, NUMBERS):
            floats = isinstance(low, FloatLiteral) or isinstance(high, FloatLiteral)
            lo, hi = (float(low.value), float(high.value)) if floats else (low.value, high.value)
            if hi < lo:
                reason = f"BETWEEN's lower bound {low.value} is above its upper bound {high.value}"
                raise self.fail(low_position, reason)
        return Between(operand, low, high, negated)

    def string(self) -> str:
        if self.peek().kind != "STRING":
            raise self.expected("a string")
        return self.take().text

    def string_list(self) -> tuple[str, ...]:
        if not self.accept("("):
            raise self.expected("'('")
        values = [self.string()]
        while self.accept(","):
            values.append(self.string())
        if not self.accept(")"):
            raise self.expected("',' or ')'")
        return tuple(values)

    def unary(self) -> Sql92:
        if self.at_word("+", "-"):
            sign = self.take().text
            operand = self.unary()
            return operand if sign == "+" else Negate(operand)
        if self.accept("NOT"):
            position = self.peek().position
            return Not(self.condition(self.unary(), position))
        return self.primary()

    def primary(self) -> Sql92:
        token = self.peek()
        if token.kind in ("ID", "STRING", "INT", "FLOAT"):
            self.take()
        if token.kind == "ID":
            return Property(token.text)
        if token.kind == "STRING":
            return StringLiteral(token.text)
        if token.kind == "INT":
            if (value := int(token.text.upper().removesuffix("L"))) > LONG_MAX:
                raise self.fail(token.position, f"integer {token.source} is out of range")
            return IntegerLiteral(value)
        if token.kind == "FLOAT":
            if not DOUBLE_MIN <= (number := float(token.text)) <= DOUBLE_MAX:
                raise self.fail(token.position, f"float {token.source} is zero or out of range")
            return FloatLiteral(number)
        if self.accept("TRUE") or self.accept("FALSE"):
            return BooleanLiteral(token.text == "TRUE")
        if self.accept("NULL"):
            return NullLiteral()
        if self.accept("("):
            node = self.logic("OR")
            if not self.accept(")"):
                raise self.expected("')'", f" to close the '(' at position {token.position}")
            return node
        raise self.expected("a value")


def sql92_parse(expression: str) -> Sql92:
    """The tree of a SQL92 filter expression (RocketMQ SelectorParser.parse); raises
    FilterExpressionError where RocketMQ refuses it, and on anything after the expression."""
    return _Parser(expression).parse()
