"""`tracelab runs`: the store's runs as one compact table that fits the terminal.

One line per run, never wrapped: id, name, backend, GPU, events, trace length, source. When the table
is wider than the terminal, the source column shrinks (then goes), then GPU, then name; text that does
not fit is cut at a word boundary (/ - _ . = space) where one is near, and ends with an ellipsis.
The recorded runs' workload and variant are part of their name (`sync_pitfalls/item_every_step/torch`),
so they get no columns of their own (`--json` has every field).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

import msgspec

from tracelab.render.text.compare import term_safe
from tracelab.text_format import fmt_count, fmt_ns

ELLIPSIS = "…"
_BOUNDARY = re.compile(r"[/\-_.=\s:,]")
GAP = "  "


class RunLike(Protocol):
    id: str
    name: str
    backend: str
    gpu: str
    events: int
    source: str

    @property
    def span_ns(self) -> int: ...


def truncate(text: str, width: int) -> str:
    """`text` in at most `width` characters: whole when it fits, else cut at the last word boundary
    that keeps at least half of the room (else at the width) and ended with '…'."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return ELLIPSIS
    room = width - 1
    cut = room
    for m in _BOUNDARY.finditer(text, 0, room + 1):
        if m.start() >= room // 2:
            cut = m.start() + (1 if m.group() in "/" else 0)  # keep a trailing '/' of a path part
    cut = min(cut, room)
    return text[:cut].rstrip() + ELLIPSIS


class _Column(msgspec.Struct):
    title: str
    cells: list[str]
    right: bool = False
    min_width: int = 0  # 0: fixed (never shrinks)

    @property
    def natural(self) -> int:
        return max([len(self.title), *(len(c) for c in self.cells)])


def _short_gpu(name: str | None) -> str:
    """A GPU name without the vendor ("NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3")."""
    text = (name or "").strip()
    for vendor in ("NVIDIA ", "AMD "):
        text = text.removeprefix(vendor)
    return text


def _source_tail(source: str) -> str:
    """The last two parts of a path: enough to recognise a file, short enough for a table."""
    parts = [p for p in source.replace("\\", "/").split("/") if p]
    return "/".join(parts[-2:]) if parts else source


def format_runs_table(records: Sequence[RunLike], width: int = 100) -> str:
    """The runs as a table of at most `width` characters per line (plain text, no colour)."""
    cols = [
        _Column("id", [term_safe(r.id) for r in records]),
        _Column("name", [term_safe(r.name or "-") for r in records], min_width=12),
        _Column("backend", [term_safe(r.backend or "-") for r in records]),
        _Column("gpu", [term_safe(_short_gpu(r.gpu) or "-") for r in records]),
        _Column("events", [fmt_count(r.events) for r in records], right=True),
        _Column("trace", [fmt_ns(r.span_ns) for r in records], right=True),
        _Column("source", [term_safe(_source_tail(r.source or "-")) for r in records], min_width=16),
    ]
    widths = {c.title: c.natural for c in cols}

    def total() -> int:
        return sum(widths[c.title] for c in cols) + len(GAP) * (len(cols) - 1)

    # too wide: shrink the source, then drop it, then GPU and backend, then cut names
    source = next(c for c in cols if c.title == "source")
    widths["source"] = min(widths["source"], max(source.min_width, widths["source"] - max(total() - width, 0)))
    for title in ("source", "gpu", "backend"):
        if title == "gpu" and total() > width:  # first the model alone ("H100 80GB HBM3" -> "H100")
            gpu = next(c for c in cols if c.title == "gpu")
            gpu.cells = [c.split()[0] if c.split() else c for c in gpu.cells]
            widths["gpu"] = gpu.natural
        if total() > width:
            cols = [c for c in cols if c.title != title]
    if total() > width:
        widths["name"] = max(width - (total() - widths["name"]), 4)

    def line(cells: list[str]) -> str:
        out = []
        for c, text in zip(cols, cells):
            w = widths[c.title]
            text = truncate(text, w)
            out.append(text.rjust(w) if c.right else text.ljust(w))
        return GAP.join(out).rstrip()

    rows = [line([c.title for c in cols])]
    rows += [line([c.cells[i] for c in cols]) for i in range(len(records))]
    return "\n".join(rows)
