"""The benchmarks' one way to print a table: rows of dicts as a Markdown table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def magnitude(value: float) -> str:
    """Thousands with separators, smaller numbers to three significant digits."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def format_table(rows: list[dict[str, Any]], columns: list[str] | None = None,
                 cell: Callable[[float], str] = magnitude) -> str:
    """`rows` under `columns` (default: the first row's keys); text as it is, a missing
    value blank, a number as `cell` writes it."""
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = ["" if value is None else value if isinstance(value, str) else cell(value)
                 for value in (row.get(column) for column in columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
