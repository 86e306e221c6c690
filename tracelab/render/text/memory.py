"""`analyze`'s GPU memory section (tracelab/analyses/device/gpu_memory.py)."""

from __future__ import annotations

import textwrap

from tracelab.analyses.device.gpu_memory import MemoryTimeline
from tracelab.render.text.compare import term_safe
from tracelab.text_format import fmt_bytes, fmt_ns

MAX_STEPS = 12


def memory_lines(m: MemoryTimeline, run_start: int | None, width: int = 100) -> list[str]:
    out = [f"GPU memory ({term_safe(m.source)}; {m.t.size:,} allocation events)"]
    for p in m.peaks:
        at = f"+{fmt_ns(p.at_ns - run_start)}" if run_start is not None else str(p.at_ns)
        line = (f"  r{p.rank}/d{p.device}: peak {fmt_bytes(p.peak_bytes)} allocated at {at}, reached by an allocation "
                f"of {fmt_bytes(p.allocation_bytes)}" + (f" in {p.op}" if p.op else ""))
        if p.reserved_peak_bytes >= 0:
            line += f"; reserved peak {fmt_bytes(p.reserved_peak_bytes)}"
        out += textwrap.wrap(term_safe(line), max(20, width), subsequent_indent="    ")
    if m.steps:
        shown = m.steps[:MAX_STEPS]
        cells = [f"#{s.index} {fmt_bytes(s.peak_bytes)}" for s in shown]
        head = "  peak per step: "
        line = head
        for c in cells:
            if len(line) + len(c) + 2 > width:
                out.append(line.rstrip(", "))
                line = " " * len(head)
            line += c + ", "
        out.append(line.rstrip(", ") + (f" (… {len(m.steps) - MAX_STEPS} more in --json)" if len(m.steps) > MAX_STEPS else ""))
    return out
