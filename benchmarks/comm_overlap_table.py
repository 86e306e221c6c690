"""README's comm_overlap rows (issue 25): per variant and backend of the bundled two-H200 runs, the
steady-state GPU step time, compute/communication overlap and exposed communication over the steps
(set-up left out; per rank, averaged over the 2 ranks), and the sizing measured on the recording GPUs.

    python benchmarks/comm_overlap_table.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tracelab.analyses.scope import steps_span_timeline
from tracelab.analyses.steps.steady import steady_step_time
from tracelab.api import analyze
from tracelab.demo import demo_run
from tracelab.io.detect import load_run_dir
from tracelab.text_format import fmt_ns


def main() -> None:
    cache = Path(tempfile.mkdtemp())
    print("| variant | backend | GPU step (steady) | comm ∥ compute per rank | exposed comm per rank | compute / all-reduce (sizing) |")
    print("|---|---|---|---|---|---|")
    for v in ("sequential", "streams", "green_ctx"):
        for b in ("nsys", "torch"):
            path = demo_run(f"comm_overlap-{v}-{b}", cache)
            tl = load_run_dir(path)
            an = analyze(tl)
            st = steady_step_time(an.step_rows)
            inner = analyze(steps_span_timeline(tl, an.step_rows))
            n = max(1, len(inner.devices))
            comm = sum(d.comm_ns for d in inner.devices)
            over = sum(d.overlap.compute_comm_ns for d in inner.devices)
            sz = json.loads((path / "meta.json").read_text())["facts"]["sizing"]
            print(f"| `{v}` | {b} | {fmt_ns(st.ns)} | {fmt_ns(over // n)} | {fmt_ns((comm - over) // n)} | "
                  f"{sz['compute_ms']:.2f} / {sz['all_reduce_ms']:.2f} ms |")


if __name__ == "__main__":
    main()
