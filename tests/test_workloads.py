"""CPU tests for the workload registry, argument validation and profiler command building."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tracelab.errors import BadInput, MissingDependency
from tracelab.record.command import record_command
from tracelab.record.nsys import NSYS_FLAGS, nsys_command
from tracelab.record.process import check_backend
from tracelab.record.workload import build_command, record_workload
from tracelab.workloads import WORKLOADS, get_workload

CONTRACT = {
    "overlap": ("serial", "streams_pinned", "streams_pageable", "concurrent_kernels"),
    "sync_pitfalls": ("item_every_step", "deferred_sync", "synchronize_in_loop", "nonzero_sync", "keep_outputs"),
    "pdl": ("no_pdl", "pdl"),
    "graphs": ("eager", "graph", "conditional", "multi_stream_eager", "multi_stream_capture"),
    "green_contexts": ("sequential", "streams", "green_ctx"),
    "fusion": ("eager_ops", "torch_fused", "compiled", "triton", "cuda"),
    "default_stream": ("legacy_blocking", "nonblocking", "per_thread_default"),
    "priorities": ("same_priority", "high_priority"),
    "comm_overlap": ("sequential", "streams", "green_ctx"),
    "input_pipeline": ("slow_loader", "fast_loader"),
}


def test_registry_has_the_contract_variants() -> None:
    assert {name: wl.variant_names() for name, wl in WORKLOADS.items()} == CONTRACT


@pytest.mark.parametrize("name", list(CONTRACT))
def test_each_workload_describes_itself(name: str) -> None:
    wl = WORKLOADS[name]
    doc = wl.to_dict()
    assert doc["name"] == name and len(doc["description"]) > 20 and len(doc["effect"]) > 100
    assert all(v["description"] for v in doc["variants"])
    assert json.loads(json.dumps(doc)) == doc  # `tracelab workloads --json` can print it
    quick, full = wl.parameters(True), wl.parameters(False)
    assert quick["steps"] <= full["steps"] and set(quick) == set(full)


def test_resolve_variants() -> None:
    wl = get_workload("pdl")
    assert wl.resolve_variants("all") == ["no_pdl", "pdl"]
    assert wl.resolve_variants(None) == ["no_pdl", "pdl"]
    assert wl.resolve_variants("pdl") == ["pdl"]
    with pytest.raises(BadInput, match="unknown variant 'fast' of workload 'pdl'.*no_pdl, pdl, all"):
        wl.resolve_variants("fast")


def test_unknown_workload_names_the_known_ones() -> None:
    with pytest.raises(BadInput, match="unknown workload 'nope'.*overlap"):
        get_workload("nope")


def test_parameter_overrides_are_typed_and_checked() -> None:
    wl = get_workload("green_contexts")
    p = wl.parameters(True, {"small_sms": "8", "matmul": "triton"})
    assert p["small_sms"] == 8 and p["matmul"] == "triton"
    with pytest.raises(BadInput, match="no parameter 'smol'"):
        wl.parameters(True, {"smol": "1"})
    with pytest.raises(BadInput, match="small_sms='x' is not a int"):
        wl.parameters(True, {"small_sms": "x"})


def test_nsys_command_uses_the_small_trace_flags(tmp_path: Path) -> None:
    cmd = build_command("overlap", "serial", "nsys", True, tmp_path, nsys="/opt/nsys")
    assert cmd[:2] == ["/opt/nsys", "profile"]
    for flag in (
        "-t",
        "cuda,nvtx,osrt",
        "--sample=none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "--export=sqlite",
    ):
        assert flag in cmd
    assert "--capture-range=cudaProfilerApi" in cmd  # the runner opens the measured window
    assert cmd[cmd.index("-o") + 1] == str(tmp_path / "trace")
    inner = cmd[cmd.index(str(tmp_path / "trace")) + 1 :]
    assert inner[1:5] == ["-m", "tracelab.workloads.runner", "overlap", "serial"]
    assert "--quick" in inner and inner[inner.index("--backend") + 1] == "nsys"
    assert nsys_command("nsys", "p", ["a"]) == ["nsys", "profile", *NSYS_FLAGS, "-o", "p", "a"]


def test_memory_variant_records_with_memory_tracing(tmp_path: Path) -> None:
    """Issue 27: a variant marked `memory` gets nsys --cuda-memory-usage=true (and torch.profiler
    profile_memory=True in the runner); the others do not."""
    wl = get_workload("sync_pitfalls")
    assert [v.name for v in wl.variants if v.memory] == ["keep_outputs"]
    assert wl.traces_memory("keep_outputs") and not wl.traces_memory("deferred_sync")
    assert any(v["memory"] for v in wl.to_dict()["variants"])
    mem = build_command("sync_pitfalls", "keep_outputs", "nsys", True, tmp_path, nsys="/opt/nsys")
    plain = build_command("sync_pitfalls", "deferred_sync", "nsys", True, tmp_path, nsys="/opt/nsys")
    assert "--cuda-memory-usage=true" in mem and "--cuda-memory-usage=true" not in plain
    assert mem.index("--cuda-memory-usage=true") < mem.index("-o")  # an nsys flag, not the program's
    assert "--cuda-memory-usage=true" not in build_command("sync_pitfalls", "keep_outputs", "torch", True, tmp_path)


def test_torch_command_runs_the_runner_directly(tmp_path: Path) -> None:
    cmd = build_command("graphs", "graph", "torch", False, tmp_path, params={"ops": 10}, seed=3)
    assert cmd[0] == sys.executable and "profile" not in cmd
    assert cmd[cmd.index("--backend") + 1] == "torch" and "--quick" not in cmd
    assert cmd[cmd.index("--param") + 1] == "ops=10" and cmd[cmd.index("--seed") + 1] == "3"


def test_bad_backend_and_variant_fail_before_running(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="unknown backend 'perf'"):
        check_backend("perf")
    with pytest.raises(BadInput, match="unknown variant"):
        record_workload("overlap", "nope", "torch", True, tmp_path)
    with pytest.raises(BadInput, match="no parameter"):
        record_workload("overlap", "serial", "torch", True, tmp_path, params={"bogus": 1})
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_no_gpu_or_no_nsys_is_a_missing_dependency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(MissingDependency, match="CUDA GPU"):
        record_workload("pdl", "pdl", "torch", True, tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TRACELAB_NSYS", raising=False)
    monkeypatch.setattr("tracelab.io.nsys.load.find_nsys", lambda: None, raising=False)
    with pytest.raises(MissingDependency, match="nsys"):
        record_workload("pdl", "pdl", "nsys", True, tmp_path)


def test_record_command_torch_needs_a_python_script(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="only profile a Python script"):
        record_command(["./a.out"], "torch", tmp_path)
    with pytest.raises(BadInput, match="needs a command"):
        record_command([], "nsys", tmp_path)
