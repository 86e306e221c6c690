"""GPU tests: run each workload variant for real (no profiler) and check what it measured.
Skipped without CUDA; run on a real H100/H200 (tests/data/README.md says when and where)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from tracelab.workloads import WORKLOADS
from tracelab.workloads.runner import run_variant


def load_probe_file(path: Path) -> dict[str, np.ndarray]:
    """sm_probe.npz as plain arrays (format: tracelab/workloads/probes.py)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


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


def _program_gaps(out: Path) -> np.ndarray:
    """Per consecutive pair of chain kernels: first program start of the next minus last program
    end of the previous (probe clock, ns)."""
    p = load_probe_file(out / "sm_probe.npz")
    inv = p["invocation"]
    u = np.unique(inv)
    firsts = np.array([p["t_start"][inv == i].min() for i in u])
    lasts = np.array([p["t_end"][inv == i].max() for i in u])
    return (firsts[1:] - lasts[:-1])[np.diff(u) == 1]


def test_pdl_shortens_the_gap_between_dependent_kernels(tmp_path: Path) -> None:
    """Measured on the SMs: with PDL the next kernel's programs start sooner after the previous
    kernel's last program (H200, 2026-11-22: median 1.9 µs without PDL, 0.54 µs with)."""
    plain = _program_gaps(run_variant("pdl", "no_pdl", tmp_path / "a", backend="none", quick=True))
    pdl = _program_gaps(run_variant("pdl", "pdl", tmp_path / "b", backend="none", quick=True))
    assert len(plain) > 10 and len(pdl) > 10
    assert np.median(pdl) < 0.6 * np.median(plain), (np.median(plain), np.median(pdl))


def test_record_torch_then_load_and_analyze(tmp_path: Path) -> None:
    from tracelab.analyses import analyze
    from tracelab.io.detect import load_run_dir
    from tracelab.record.workload import record_workload

    (run,) = record_workload("pdl", "pdl", "torch", True, tmp_path)
    tl = load_run_dir(run)
    assert tl.meta.backend == "torch" and tl.meta.variant == "pdl" and tl.sm_blocks is not None
    assert "pdl" in {f.rule for f in analyze(tl).findings}


def test_record_nsys_then_load(tmp_path: Path) -> None:
    from tracelab.io.detect import load_run_dir
    from tracelab.record.nsys import find_nsys
    from tracelab.record.workload import record_workload

    if find_nsys() is None:
        pytest.skip("no nsys on this machine")
    (run,) = record_workload("green_contexts", "green_ctx", "nsys", True, tmp_path, params={"elementwise": 2})
    tl = load_run_dir(run)
    green = sorted(c.sm_count for c in tl.contexts if c.is_green)
    assert sum(green) == torch.cuda.get_device_properties(0).multi_processor_count and green[0] == 16
    assert set(tl.sm_blocks["green_context"].unique()) == {c.green_context for c in tl.contexts if c.is_green}
