"""`analyze`'s "GPU time by range" table (tracelab/analyses/device/range_projection.py)."""

from __future__ import annotations

import textwrap

from tracelab.analyses.device.range_projection import RangeProjection
from tracelab.render.text.compare import term_safe
from tracelab.text_format import fmt_ns

TOP = 10


def ranges_lines(p: RangeProjection, top: int | None = TOP, width: int = 100) -> list[str]:
    if not p.stats:
        return []
    shown = p.stats if top is None else p.stats[:top]
    name_w = max(20, min(70, width - 57))
    scope = f"all {len(p.stats)}" if top is None or top >= len(p.stats) else f"top {len(shown)} of {len(p.stats)}; --ranges for all"
    out = [
        f"GPU time by range ({scope})",
        *textwrap.wrap("GPU ops launched inside each range on its thread; nested ranges are not subtracted from "
                       f"their parents; share = of the {p.reference}", max(20, width)),
        f"{'range':<{name_w}} {'kind':<6} {'calls':>6} {'GPU time':>10} {'kernels':>10} {'span':>10} {'share':>7}",
    ]
    out.append("─" * (name_w + 57))
    for s in shown:
        name = term_safe(("  " * min(s.depth, 4)) + s.name, name_w)
        out.append(f"{name:<{name_w}} {s.kind:<6} {s.calls:>6} {fmt_ns(s.gpu_ns):>10} {fmt_ns(s.kernel_ns):>10} "
                   f"{fmt_ns(s.span_ns):>10} {s.share:>7.1%}")
    if p.unlaunched_ops:
        out.append(f"({p.unlaunched_ops} GPU ops have no launch call in the trace: in no range)")
    return out
