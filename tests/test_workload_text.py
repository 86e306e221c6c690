"""`tracelab analyze` on a built-in workload's run prints the figures the workload exists to show
(issue 14), checked against the raw torch.profiler JSON of the bundled H100 recordings."""

from __future__ import annotations

import gzip
import json
import statistics

from click.testing import CliRunner

from tracelab.cli import main
from tracelab.demo import demo_run
from tracelab.text_format import fmt_ns


def _raw(run):
    meta = json.loads((run / "meta.json").read_text())
    return meta, json.loads(gzip.decompress((run / "trace.json.gz").read_bytes()))["traceEvents"]


def _analyze(run, tmp_path) -> str:
    r = CliRunner().invoke(main, ["--db", str(tmp_path / "t.db"), "analyze", str(run)])
    assert r.exit_code == 0, r.output
    assert all(len(line) <= 100 for line in r.stdout.splitlines())
    return r.stdout.split("Workload figures\n", 1)[1] if "Workload figures\n" in r.stdout else ""


def test_fusion_figures_in_analyze(tmp_path):
    run = demo_run("fusion-triton-torch", cache=tmp_path / "c")
    meta, events = _raw(run)
    steps = meta["steps"]
    gelu = [e for e in events if e.get("cat") == "kernel" and e["name"] == "gelu_tanh_kernel"]
    others = [e for e in events if e.get("cat") == "kernel" and e["name"] != "gelu_tanh_kernel"]
    assert len(gelu) == steps and not others  # one fused kernel a step, nothing else
    per_step = sum(round(e["dur"] * 1000) for e in gelu) / steps
    text = _analyze(run, tmp_path)
    assert f"fusion/triton: 1.0 kernels a step, kernel time {fmt_ns(per_step)} a step" in text


def test_priorities_latency_in_analyze(tmp_path):
    run = demo_run("priorities-same_priority-torch", cache=tmp_path / "c")
    _meta, events = _raw(run)
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    delays = sorted(
        round((e["ts"] - launches[e["args"]["correlation"]]) * 1000)
        for e in events
        if e.get("cat") == "kernel" and e["name"].startswith("latency_kernel")
    )
    text = _analyze(run, tmp_path)
    assert f"launch→start delay (n={len(delays)})" in text
    assert f"median {fmt_ns(statistics.median(delays))}" in text
    assert f"max {fmt_ns(delays[-1])}" in text


def test_other_runs_print_no_workload_figures(tmp_path):
    assert _analyze(demo_run("pdl-pdl-torch", cache=tmp_path / "c"), tmp_path) == ""
