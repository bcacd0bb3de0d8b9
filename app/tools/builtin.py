"""The built-in tools a run can name (``--tools calculator``): plain typed, documented functions, as TRL takes them.

``calculator`` evaluates arithmetic by walking Python's own parse tree of the expression and allowing only numbers,
+ - * / // % ** and parentheses: no names, no calls, no attribute access, so a model's argument can never run code
(Python's ``eval`` would). Powers and results are bounded so a call cannot stall the run on a huge number.
"""

from __future__ import annotations

import ast
import operator

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 64  # 2 ** 64 is a big enough number for a word problem; 9 ** 9 ** 9 would never finish
MAX_DIGITS = 60
MAX_LENGTH = 200  # characters of expression


def _number(value) -> str:
    """A result as a person writes it: 12 rather than 12.0, at most 10 decimals."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("the result is not a finite number")
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.10f}".rstrip("0").rstrip(".")
    return str(value)


def _walk(node):
    if isinstance(node, ast.Expression):
        return _walk(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _walk(node.left), _walk(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"the exponent {right} is too large (at most {MAX_EXPONENT})")
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, int) and len(str(abs(value))) > MAX_DIGITS:
            raise ValueError(f"the result has more than {MAX_DIGITS} digits")
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_walk(node.operand))
    raise ValueError(f"'{ast.unparse(node)}' is not arithmetic: use numbers, + - * / // % ** and parentheses")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: The arithmetic to compute, with numbers, + - * / and parentheses, for example "(12 + 30) / 7".

    Returns:
        The result as a number.
    """
    if not isinstance(expression, str):
        raise ValueError(f"expression must be text such as \"12 + 30\", got {type(expression).__name__}")
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("^", "**")
    if not text:
        raise ValueError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"'{expression}' is not an arithmetic expression") from None
    try:
        return _number(_walk(tree))
    except ZeroDivisionError:
        raise ValueError("division by zero") from None


BUILTIN_TOOLS = {"calculator": calculator}
