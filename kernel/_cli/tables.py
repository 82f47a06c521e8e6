"""Tables for people: aligned columns that fit the terminal, the last column cut short.

Written by hand rather than with a table library: the command line needs one shape (a
header, rows, the widest column shortened to fit), and a dependency for it would cost every
user an install for a few dozen lines.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence

__all__ = ["table", "width"]

_GAP = "  "
_MIN_LAST = 12


def width() -> int:
    """The terminal's width, or 100 columns when the output is not a terminal."""
    return shutil.get_terminal_size((100, 24)).columns


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, limit: int | None = None) -> str:
    """`rows` under `header`, columns aligned; the last column is cut (with "…") so that a
    line fits `limit` columns (the terminal's width by default)."""
    limit = width() if limit is None else limit
    cells = [[_one_line(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    room = max(limit - sum(widths[:-1]) - len(_GAP) * (len(widths) - 1), _MIN_LAST)
    lines = []
    for row in cells:
        *first, last = row
        if len(last) > room:
            last = last[: room - 1] + "…"
        lines.append(_GAP.join([*(c.ljust(w) for c, w in zip(first, widths, strict=False)), last]))
    return "\n".join(line.rstrip() for line in lines)


def _one_line(cell: str) -> str:
    return cell.replace("\r", " ").replace("\n", "⏎")
