"""Tables for people: aligned columns that fit the terminal, the last column cut short.

Widths are counted in terminal columns, not characters: a CJK character takes two, a
combining mark or a zero-width character none, so that state written in Chinese lines up
as English does.

Written by hand rather than with a table library: the command line needs one shape (a
header, rows, the widest column shortened to fit), and a dependency for it would cost every
user an install for a few dozen lines.
"""

from __future__ import annotations

import shutil
import unicodedata
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
    # The last column is cut to the room left, never measured whole: a value shown there
    # may be megabytes of JSON.
    sizes = [[_columns(cell) for cell in row[:-1]] for row in cells]
    widths = [max(row[i] for row in sizes) for i in range(len(header) - 1)]
    room = max(limit - sum(widths) - len(_GAP) * len(widths), _MIN_LAST)
    lines = []
    for row, size in zip(cells, sizes, strict=True):
        padded = [c + " " * (w - n) for c, n, w in zip(row[:-1], size, widths, strict=False)]
        lines.append(_GAP.join([*padded, _cut(row[-1], room)]))
    return "\n".join(line.rstrip() for line in lines)


def _columns(text: str) -> int:
    """How many terminal columns `text` takes."""
    return sum(_char_columns(char) for char in text)


def _char_columns(char: str) -> int:
    if unicodedata.category(char) in ("Mn", "Me", "Cf"):  # marks and format characters
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _cut(text: str, room: int) -> str:
    """`text` as it is when it fits `room` columns, else as much as fits before a "…"
    (read only as far as the cut)."""
    used = 0
    for index, char in enumerate(text):
        used += _char_columns(char)
        if used > room:
            kept, columns = index, used - _char_columns(char)
            while columns > room - 1:  # room for the "…"
                kept -= 1
                columns -= _char_columns(text[kept])
            return text[:kept] + "…"
    return text


def _one_line(cell: str) -> str:
    return cell.replace("\r", " ").replace("\n", "⏎")
