"""`tracelab sql` output: a plain table (terminal-safe cells), CSV, or the JSON document."""

from __future__ import annotations

import csv
import io
from typing import Any

from tracelab.render.text.compare import term_safe

MAX_CELL = 60


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    return term_safe(v, MAX_CELL)


def format_table(columns: tuple[str, ...], rows: tuple[tuple[Any, ...], ...]) -> str:
    """Columns padded to their widest cell, numbers right-aligned; '(0 rows)' under an empty result."""
    head = [term_safe(c, MAX_CELL) for c in columns]
    body = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(head)]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in body]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out) + "\n"


def format_csv(columns: tuple[str, ...], rows: tuple[tuple[Any, ...], ...]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(["" if v is None else v for v in r] for r in rows)
    return buf.getvalue()
