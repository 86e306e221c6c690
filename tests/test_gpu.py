"""GPU tests: run each workload variant for real (no profiler) and check what it measured.
Skipped without CUDA; run on a real H100/H200 (tests/data/README.md says when and where)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from tracelab.workloads import WORKLOADS  # noqa: E402
from tracelab.workloads.probes import load_probe_file  # noqa: E402
from tracelab.workloads.runner import run_variant  # noqa: E402

CASES = [(w, v) for w, wl in WORKLOADS.items() for v in wl.variant_names()]


@pytest.mark.parametrize("workload,variant", CASES)
def test_variant_runs_and_writes_meta(tmp_path: Path, workload: str, variant: str) -> None:
    out = run_variant(workload, variant, tmp_path / "run", backend="none", quick=True)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["workload"] == workload and meta["variant"] == variant
    assert len(meta["step_wall_ms"]) == meta["steps"] > 0
    assert all(t > 0 for t in meta["step_wall_ms"])
    assert meta["gpu"]["sm_count"] == torch.cuda.get_device_properties(0).multi_processor_count
    if "probe" in meta and meta["probe"]["rows"]:
        p = load_probe_file(out / "sm_probe.npz")
        assert (p["smid"] >= 0).all() and (p["smid"] < meta["gpu"]["sm_count"]).all()
        assert (p["t_end"] >= p["t_start"]).all()


def test_green_ctx_partitions_use_exactly_their_sms(tmp_path: Path) -> None:
    out = run_variant("green_contexts", "green_ctx", tmp_path / "gc", backend="none", quick=True)
    meta = json.loads((out / "meta.json").read_text())
    parts = meta["partitions"]
    sms = meta["gpu"]["sm_count"]
    assert sum(p["sm_count"] for p in parts) == sms
    p = load_probe_file(out / "sm_probe.npz")
    names = list(p["names"])
    for i, part in enumerate(parts):
        rows = p["kernel"] == names.index(part["marker"])
        used = set(np.unique(p["smid"][rows]).tolist())
        assert len(used) == part["sm_count"], (part, len(used))
    large = set(np.unique(p["smid"][p["kernel"] == names.index(parts[0]["marker"])]).tolist())
    small = set(np.unique(p["smid"][p["kernel"] == names.index(parts[1]["marker"])]).tolist())
    assert not (large & small)


def test_pdl_overlaps_on_device(tmp_path: Path) -> None:
    """With PDL, a chain kernel's first program starts before the previous kernel's last one ends."""
    out = run_variant("pdl", "pdl", tmp_path / "pdl", backend="none", quick=True)
    p = load_probe_file(out / "sm_probe.npz")
    inv = p["invocation"]
    firsts = np.array([p["t_start"][inv == i].min() for i in np.unique(inv)])
    lasts = np.array([p["t_end"][inv == i].max() for i in np.unique(inv)])
    consecutive = np.diff(np.unique(inv)) == 1
    overlap = (lasts[:-1] - firsts[1:])[consecutive]
    assert (overlap > 0).mean() > 0.5, overlap
