"""benchmarks/load_timeline.py times the real command's steps: every step it wraps still exists, and the
phases it reports nest as the command runs them (load, then analysis, then extras, then write)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "train_plain_torch"


def test_load_timeline_times_each_phase_in_order(tmp_path: Path) -> None:
    dump = tmp_path / "events.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "load_timeline.py"), str(TRACE), "--dump", str(dump)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    events = json.loads(dump.read_text())
    phases = {step: (a, b) for thread, step, a, b, _cpu in events if thread == "MainThread" and step.isupper()}
    assert list(phases) == ["LOAD", "ANALYZE", "EXTRAS", "WRITE"]
    ends = [phases[p] for p in ("LOAD", "ANALYZE", "EXTRAS", "WRITE")]
    assert all(a <= b for a, b in ends) and all(ends[i][1] <= ends[i + 1][0] for i in range(3))
    load = phases["LOAD"]
    steps = {step for _t, step, a, b, _c in events if load[0] <= a and b <= load[1]}
    assert {"scan", "piece_work", "merge", "finish"} <= steps  # the reader's steps happen inside the load
    assert all(cpu >= 0 for *_rest, cpu in events)
    printed = proc.stdout.splitlines()
    assert printed[0].startswith("imports ") and any(" LOAD " in line for line in printed)
