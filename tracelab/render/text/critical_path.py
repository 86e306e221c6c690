"""The "Critical path" section of `tracelab analyze`: what sets each step's length (tracelab.analyses.
critical_path), in a few lines of plain text (names through `term_safe`)."""

from __future__ import annotations

from collections import defaultdict

from tracelab.analyses.ranks.path_model import CATEGORIES, CriticalPath
from tracelab.render.text.compare import term_safe
from tracelab.text_format import fmt_ns

WORDS = {
    "compute": "compute",
    "comm": "comm transfer",
    "wait": "waiting for another rank",
    "host": "host launch/CPU",
    "sync": "host sync",
    "idle": "idle",
}


def _shares(bound: dict[str, float]) -> str:
    parts = [(k, v) for k, v in sorted(bound.items(), key=lambda kv: -kv[1]) if v >= 0.005]
    return ", ".join(f"{k} {100 * v:.0f}%" for k, v in parts) or "-"


def format_critical_path(cp: CriticalPath, max_ranks: int = 8, width: int = 100) -> str:
    """The section as text ending in a newline (lines of at most `width` columns); '' without a path."""
    if not cp.steps:
        return ""
    lines = [
        "Critical path (what sets each step's length; host = host launch/CPU, wait = waiting for another",
        "rank, comm = communication transfer, sync = host sync)",
    ]
    multi = len({p.rank for p in cp.steps}) > 1
    if cp.across:
        on_rank: dict[int, int] = defaultdict(int)
        for p in cp.across:
            for r, a, b in zip(p.seg_rank.tolist(), p.seg_start.tolist(), p.seg_end.tolist()):
                on_rank[r] += b - a
        total = sum(on_rank.values()) or 1
        where = ", ".join(f"rank {r} {100 * t / total:.0f}%" for r, t in sorted(on_rank.items(), key=lambda x: -x[1])[:3])
        lines.append(f"  across ranks ({len(cp.across)} steps): {_shares(cp.bound_by(cp.across))}")
        lines.append(f"    the path's time: on {where}")
    per_rank: dict[int, list] = defaultdict(list)
    for p in cp.steps:
        per_rank[p.rank].append(p)
    for r in sorted(per_rank)[:max_ranks]:
        paths = per_rank[r]
        lengths = sorted(p.length_ns for p in paths)
        label = f"rank {r}" if multi else "per step"
        lines.append(
            f"  {label}: {len(paths)} steps, median {fmt_ns(lengths[len(lengths) // 2])}: {_shares(cp.bound_by(paths))}"
        )
    if len(per_rank) > max_ranks:
        lines.append(f"  ({len(per_rank) - max_ranks} more ranks)")
    named: dict[tuple[str, str], int] = defaultdict(int)
    for p in cp.across or cp.steps:
        for cat, name, ns in p.top:
            if name and cat in CATEGORIES:
                named[(cat, name)] += ns
    top = sorted(named.items(), key=lambda kv: -kv[1])[:3]
    if top:
        lines.append("  longest on the path:")
        for (c, n), t in top:
            head = f"    {c:<7} {fmt_ns(t):>10}  "
            lines.append(head + term_safe(n, max(width - len(head), 10)))
    for n in cp.notes:
        lines.append(f"  - {term_safe(n, width - 4)}")
    return "\n".join(line[:width] for line in lines) + "\n"


def critical_path_table(cp: CriticalPath, max_rows: int = 32) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the critical path per rank (and across ranks first), plain text cells for the
    reports to escape: steps, median step, each category's share, the longest event on the path."""
    header = ["path", "steps", "median step", *(WORDS[c] for c in CATEGORIES), "longest on the path"]
    groups: list[tuple[str, list]] = []
    if cp.across:
        groups.append(("across ranks", list(cp.across)))
    per_rank: dict[int, list] = defaultdict(list)
    for p in cp.steps:
        per_rank[p.rank].append(p)
    groups += [(f"rank {r}", per_rank[r]) for r in sorted(per_rank)][: max(max_rows - len(groups), 0)]
    rows = []
    for label, paths in groups:
        lengths = sorted(p.length_ns for p in paths)
        shares = cp.bound_by(paths)
        named: dict[tuple[str, str], int] = defaultdict(int)
        for p in paths:
            for cat, name, ns in p.top:
                named[(cat, name)] += ns
        longest = max(named.items(), key=lambda kv: kv[1]) if named else None
        rows.append(
            [
                label,
                str(len(paths)),
                fmt_ns(lengths[len(lengths) // 2]),
                *(f"{100 * shares[c]:.0f}%" for c in CATEGORIES),
                f"{WORDS[longest[0][0]]}: {longest[0][1]} ({fmt_ns(longest[1])})" if longest else "-",
            ]
        )
    return header, rows

