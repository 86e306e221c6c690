"""Kernel and op names short enough for one line (used by analyses that list kernels and by renderers)."""

from __future__ import annotations

from functools import lru_cache


def _collapse(s: str, open_: str, close: str) -> str:
    """Replace every top-level open_ ... close group with open_ + '…' + close."""
    out, depth = [], 0
    for ch in s:
        if ch == open_:
            if depth == 0:
                out.append(open_ + "…")
            depth += 1
        elif ch == close and depth:
            depth -= 1
            if depth == 0:
                out.append(close)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


@lru_cache(maxsize=1 << 14)  # a trace has a few thousand distinct names; the JSON writer asks per chunk of gaps
def short_name(name: str, limit: int = 70) -> str:
    """A kernel or op name short enough for one line: drops 'void ', the trailing argument list
    and, when still long, template arguments."""
    s = name.strip()
    s = s.removeprefix("void ")
    if s.endswith(")"):  # cut the trailing (matching) argument list
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                if i > 0:
                    s = s[:i]
                break
    if len(s) > limit:
        s = _collapse(s, "<", ">")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.strip() or "?"
