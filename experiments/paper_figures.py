"""A claim's paper figure: a number, or arithmetic over the point's values, evaluated without eval.

Why its own module: a definition's claim writes the paper's figure as a number or an
expression (`paper: ring_vs_innet(8)`, `paper: workers / 2`), checked when the file is read
and evaluated per for_each expansion; `ring_vs_innet`, the analytic ring over in-network
time, is also the report's reference line.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from agglab.ground import wire


def ring_vs_innet(n: int) -> float:
    """Analytic ring / in-network time on one switch: ring moves 2(n-1)/n of the gradient over
    each host link, in-network 1x, each at its own wire efficiency (aggregation frame: K
    values under the Ethernet/IP/UDP/agg headers; TCP: a 1448 B segment in a 1514 B frame)."""
    innet = wire.DATA_BYTES / wire.FRAME_BYTES
    tcp = 1448 / 1514
    return 2 * (n - 1) / n * innet / tcp


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.Pow: operator.pow, ast.USub: operator.neg}
FUNCTIONS = {"ring_vs_innet": ring_vs_innet, "min": min, "max": max}


def evaluate(expr: Any, names: dict[str, Any]) -> float:
    """A claim's paper figure: a number, or arithmetic over the point's values (no eval)."""
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return float(expr)

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            return FUNCTIONS[node.func.id](*[walk(a) for a in node.args])
        raise ValueError(f"cannot evaluate {ast.unparse(node)!r} (numbers, + - * / **, "
                         f"{', '.join(FUNCTIONS)} and the names {', '.join(sorted(names))})")
    return float(walk(ast.parse(str(expr), mode="eval")))
