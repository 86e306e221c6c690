"""Gap evidence cost: this checkout beside a baseline checkout (e.g. main), on the same trace.

Since issue 10 the analysis returns structured gap evidence (GapDetails) and tracelab.render.text.gap_evidence
writes the sentences: the text output words only the gaps it shows, `analyze --json` all of them. This
measures, per side, in its own child process (so each peak RSS is its own), on one parsed timeline:

- analyze:  `tracelab.api.analyze` (the analysis, findings with prose; before: also every gap's evidence);
- text:     the `tracelab analyze` text output (top 10 gaps);
- json:     the `analyze --json` document (every gap's evidence);
- evidence: the evidence of every gap alone (this checkout only: before, it was part of analyze).

CPU seconds (user + sys, the minimum of --repeats runs), gaps per second of evidence, peak RSS.

    python benchmarks/make_big_kineto.py ../shared/corpus/hta/df_index_resolver__df_index_resolver.json.gz \
        /tmp/big16.json --copies 16
    python benchmarks/bench_gap_evidence.py /tmp/big16.json --baseline /path/to/main/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[2])
from tracelab import api
from tracelab.render.text.analysis import format_analysis
try:
    from tracelab.render.export.document import to_document
    from tracelab.render.text.gap_evidence import gap_evidence
except ImportError:  # before issue 10's structured evidence
    from tracelab.render.export.document import to_document
    gap_evidence = None

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

tl = api.load(sys.argv[1])
best = {}
for _ in range(int(sys.argv[3])):
    t0 = cpu(); a = api.analyze(tl); t1 = cpu()
    format_analysis(a, title="bench", top_gaps=10, width=100); t2 = cpu()
    to_document(a); t3 = cpu()
    times = {"analyze": t1 - t0, "text": t2 - t1, "json": t3 - t2}
    if gap_evidence is not None:
        gap_evidence(a); times["evidence"] = cpu() - t3
    for k, v in times.items():
        best[k] = min(best.get(k, v), v)
print(json.dumps({"gaps": len(a.gaps), "cpu_s": best,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_side(root: Path, trace: Path, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(trace), str(root), str(repeats)],
        capture_output=True, text=True, check=True, cwd=root, env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--baseline", type=Path, help="another tracelab checkout to compare with (e.g. main)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    sides = {"this": run_side(ROOT, a.trace, a.repeats)}
    if a.baseline:
        sides["baseline"] = run_side(a.baseline.resolve(), a.trace, a.repeats)
    print(f"{a.trace.name}: {sides['this']['gaps']:,} gaps; CPU seconds, best of {a.repeats}; load {os.getloadavg()[0]:.1f}")
    print(f"{'':10}{'analyze':>9}{'text':>8}{'json':>8}{'evidence':>10}{'text path':>11}{'json path':>11}{'peak RSS':>10}")
    for name, r in sides.items():
        c = r["cpu_s"]
        ev = f"{c['evidence']:.3f}" if "evidence" in c else "-"
        print(f"{name:10}{c['analyze']:9.3f}{c['text']:8.3f}{c['json']:8.3f}{ev:>10}"
              f"{c['analyze'] + c['text']:11.3f}{c['analyze'] + c['json']:11.3f}{r['peak_rss'] / 2**20:8.0f} MB")
    this = sides["this"]["cpu_s"]
    if "evidence" in this and this["evidence"] > 0:
        print(f"evidence of every gap: {sides['this']['gaps'] / this['evidence']:,.0f} gaps/s")
    if "baseline" in sides:
        base = sides["baseline"]["cpu_s"]
        for path, keys in (("text path (analyze + text)", ("analyze", "text")), ("json path", ("analyze", "json"))):
            t, b = sum(this[k] for k in keys), sum(base[k] for k in keys)
            print(f"{path}: {t:.3f} s vs {b:.3f} s baseline ({b / t:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
