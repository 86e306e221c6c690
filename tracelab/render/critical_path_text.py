"""The "Critical path" section of `tracelab analyze`: what sets each step's length (tracelab.analyses.
critical_path), in a few lines of plain text (names through `term_safe`)."""

from __future__ import annotations

from collections import defaultdict

from ..analyses.critical_path import CATEGORIES, CriticalPath
from .compare_text import fmt_ns, term_safe

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
    return ", ".join(f"{WORDS[k]} {100 * v:.0f}%" for k, v in parts) or "-"


def format_critical_path(cp: CriticalPath, max_ranks: int = 8) -> str:
    """The section as text ending in a newline; '' when there is no path."""
    if not cp.steps:
        return ""
    lines = ["Critical path (the chain that sets each step's length)"]
    multi = len({p.rank for p in cp.steps}) > 1
    if cp.across:
        on_rank: dict[int, int] = defaultdict(int)
        for p in cp.across:
            for s in p.segments:
                on_rank[s.rank] += s.length_ns
        total = sum(on_rank.values()) or 1
        where = ", ".join(f"rank {r} {100 * t / total:.0f}%" for r, t in sorted(on_rank.items(), key=lambda x: -x[1])[:4])
        lines.append(f"  across ranks ({len(cp.across)} steps): {_shares(cp.bound_by(cp.across))}; time on {where}")
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
        lines.append(
            "  longest on the path: "
            + "; ".join(f"{WORDS[c]} {term_safe(n, 60)} {fmt_ns(t)}" for (c, n), t in top)
        )
    for n in cp.notes:
        lines.append(f"  - {term_safe(n, 300)}")
    return "\n".join(lines) + "\n"
