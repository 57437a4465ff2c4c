"""Plain-text tables, as the commands print them."""

from __future__ import annotations

from collections.abc import Sequence


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """`title`, then aligned columns; a table without rows says `(none)`."""
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [title]
    for row in cells:
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )
    if not rows:
        lines.append("  (none)")
    return "\n".join(lines)
