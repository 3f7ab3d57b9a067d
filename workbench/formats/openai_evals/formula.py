"""A multi grader's ``calculate_output``: parsed into a tree once and evaluated without ``eval``.

What the graders guide allows: numbers, the names of the multi grader's ``graders`` keys, parentheses, the
operators ``+ - * /`` and ``^`` (power, right-associative, binding tighter than a unary minus), and the
functions ``min max abs floor ceil exp sqrt log`` (``min``/``max`` of one or more arguments; ``log`` natural).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.formats.openai_evals.errors import EvalDefinitionError

FUNCTIONS: dict[str, tuple[Callable[..., float], int | None]] = {  # name: (function, arity; None: one or more)
    "min": (min, None), "max": (max, None), "abs": (abs, 1), "floor": (math.floor, 1), "ceil": (math.ceil, 1),
    "exp": (math.exp, 1), "sqrt": (math.sqrt, 1), "log": (math.log, 1),
}
_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(.))")
_BINARY = {"+": (1, lambda a, b: a + b), "-": (1, lambda a, b: a - b), "*": (2, lambda a, b: a * b),
           "/": (2, lambda a, b: a / b)}


@dataclass(frozen=True, slots=True)
class Formula:
    """A parsed formula: ``evaluate({name: score})`` computes it."""

    text: str
    tree: Any
    names: frozenset[str]

    def evaluate(self, values: Mapping[str, float]) -> float:
        return float(_eval(self.tree, values))


def parse(text: str, names: set[str], where: str) -> Formula:
    """Parse ``text`` over the variables ``names``; anything else is refused naming ``where``."""
    tokens = _tokenize(text, where)
    parser = _Parser(tokens, names, where, text)
    tree = parser.expression(0)
    left = parser.peek()
    if left is not None:
        parser.fail(f"unexpected {left[1]!r}")
    return Formula(text, tree, frozenset(parser.used))


def _tokenize(text: str, where: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
        if m.group(1):
            out.append(("num", m.group(1)))
        elif m.group(2):
            out.append(("name", m.group(2)))
        elif m.group(3):
            if m.group(3) not in "+-*/^(),":
                raise EvalDefinitionError(f"{where}: {text!r} has {m.group(3)!r}, which is no operator of a formula "
                                          "(+ - * / ^, parentheses, commas)")
            out.append(("op", m.group(3)))
    return out


class _Parser:
    """Precedence climbing over the tokens: ``+ -`` < ``* /`` < unary minus < ``^`` < calls and atoms."""

    def __init__(self, tokens: list[tuple[str, str]], names: set[str], where: str, text: str) -> None:
        self.tokens, self.names, self.where, self.text, self.i = tokens, names, where, text, 0
        self.used: set[str] = set()

    def fail(self, why: str) -> None:
        raise EvalDefinitionError(f"{self.where}: {self.text!r} cannot be read: {why}")

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            self.fail("it ends too early")
            raise AssertionError  # fail() raised
        if value is not None and tok != ("op", value):
            self.fail(f"expected {value!r}, found {tok[1]!r}")
        self.i += 1
        return tok

    def expression(self, min_level: int) -> Any:
        left = self.unary()
        while (tok := self.peek()) is not None and tok[0] == "op" and tok[1] in _BINARY \
                and _BINARY[tok[1]][0] >= min_level + 1:
            self.i += 1
            left = ("bin", tok[1], left, self.expression(_BINARY[tok[1]][0]))
        return left

    def unary(self) -> Any:
        if self.peek() in (("op", "-"), ("op", "+")):
            sign = self.take()[1]
            operand = self.unary()
            return ("neg", operand) if sign == "-" else operand
        return self.power()

    def power(self) -> Any:
        base = self.atom()
        if self.peek() == ("op", "^"):
            self.i += 1
            return ("pow", base, self.unary())
        return base

    def atom(self) -> Any:
        kind, value = self.take()
        if kind == "num":
            return ("num", float(value))
        if kind == "op" and value == "(":
            inner = self.expression(0)
            self.take(")")
            return inner
        if kind == "name":
            if self.peek() == ("op", "("):
                return self.call(value)
            if value not in self.names:
                self.fail(f"{value!r} is none of its graders ({', '.join(sorted(self.names))})")
            self.used.add(value)
            return ("var", value)
        self.fail(f"unexpected {value!r}")

    def call(self, name: str) -> Any:
        if name not in FUNCTIONS:
            self.fail(f"{name}() is not one of its functions ({', '.join(FUNCTIONS)})")
        self.take("(")
        args = [self.expression(0)]
        while self.peek() == ("op", ","):
            self.i += 1
            args.append(self.expression(0))
        self.take(")")
        arity = FUNCTIONS[name][1]
        if arity is not None and len(args) != arity:
            self.fail(f"{name}() takes {arity} argument, not {len(args)}")
        return ("call", name, tuple(args))


def _eval(node: Any, values: Mapping[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return float(node[1])
    if kind == "var":
        return float(values[node[1]])
    if kind == "neg":
        return -_eval(node[1], values)
    if kind == "pow":
        return float(_eval(node[1], values) ** _eval(node[2], values))
    if kind == "bin":
        return float(_BINARY[node[1]][1](_eval(node[2], values), _eval(node[3], values)))
    fn = FUNCTIONS[node[1]][0]
    return float(fn(*(_eval(a, values) for a in node[2])))
