"""Issue 29's workload `input_pipeline`: its contract (no torch needed) and a CPU-only smoke run (torch
without CUDA: the loop, the DataLoader and its ops under torch.profiler; skipped where torch is absent).
The GPU recordings (`tracelab record input_pipeline --variant all --backend nsys|torch --quick`) are made
on the GPU machine and then tested in tests/test_recorded.py like every bundled workload."""

from __future__ import annotations

import json

import pytest

from tracelab.workloads import get_workload


def test_variants_and_parameters() -> None:
    wl = get_workload("input_pipeline")
    assert wl.variant_names() == ("slow_loader", "fast_loader")
    p = wl.parameters(quick=True)
    # slow: 2 workers, 5 ms per sample: one batch per worker takes batch * 5 ms = 40 ms, i.e. a batch every
    # 20 ms from 2 workers, against a GPU step of a few ms
    assert (p["slow_workers"], p["sample_ms"]) == (2, 5.0) and p["gpu_step_ms"] < 10
    assert p["batch"] * p["sample_ms"] / p["slow_workers"] > 4 * p["gpu_step_ms"]
    # fast: enough workers that one batch per GPU step is delivered
    assert p["batch"] * p["sample_ms"] / p["fast_workers"] <= p["gpu_step_ms"]


@pytest.mark.needs_gpu_tools
@pytest.mark.parametrize("variant", ["slow_loader", "fast_loader"])
def test_cpu_smoke_run_records_the_loader_ops(variant: str, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from tracelab.analyses.core.host import HostView
    from tracelab.io import load_trace
    from tracelab.workloads.input_pipeline import WORKLOAD, train

    # the variant's loop on CPU-only torch (no GPU): small and quick
    p = {**WORKLOAD.params, "steps": 3, "sample_ms": 1.0, "width": 64, "sample_rows": 4, "fast_workers": 2,
         "prefetch_factor": 2}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        facts = train(variant, p, 0, ((i, i >= 1) for i in range(3)), "cpu")
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    assert facts["num_workers"] == 2 and facts["persistent_workers"] == (variant == "fast_loader")
    raw = json.loads(path.read_text())["traceEvents"]
    nexts = [e for e in raw if e.get("name", "").startswith("enumerate(DataLoader)#") and e["name"].endswith("__next__")]
    assert len(nexts) == 3
    tl = load_trace(path)
    ops = HostView(tl, 0).input_ops()
    by_name = {tl.name(k): v for k, v in ops.items()}
    assert by_name[nexts[0]["name"]][0] == 3 and by_name["load batch"][0] == 3
