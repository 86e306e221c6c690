"""Issue 14's two rules on small hand-made programs (written as Kineto JSON and as nsys SQLite by
tests/golden/trace_builder.py, analysed through the CLI); every expected number is worked out here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
from rule_contract import check_findings
from trace_builder import Program

from tracelab.analyses.rules.unfused_elementwise import op_label, periods
from tracelab.cli import main


@pytest.fixture(params=["kineto", "nsys"])
def analyze_doc(request, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    fmt = request.param
    count = iter(range(1000))

    def run(p: Program) -> dict:
        n = next(count)
        path = p.kineto(tmp_path / f"t{n}.json") if fmt == "kineto" else p.nsys(tmp_path / f"t{n}.sqlite")
        r = CliRunner().invoke(main, ["analyze", str(path), "--json"], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        findings = json.loads(r.stdout)["findings"]
        check_findings(findings)  # the rules' data contract and prose (tests/golden/rule_contract.py)
        return {f["rule"]: f for f in findings}

    return run


def period(codes: np.ndarray, max_period: int) -> int:
    return int(periods(codes, np.array([0]), np.array([codes.size]), max_period)[0])


def test_period_and_labels() -> None:
    assert period(np.array([1, 2, 3, 1, 2, 3, 1, 2]), 16) == 3
    assert period(np.array([5, 5, 5, 5]), 16) == 1
    assert period(np.array([1, 2, 3, 4]), 16) == 0  # no repetition
    assert op_label("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
                    "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int)") == "Mul"
    assert op_label("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctorOnSelf_add"
                    "<float>, std::array<char *, (unsigned long)2>>(int, T2, T3)") == "add"
    assert op_label("void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(at::Tensor"
                    "IteratorBase&)::{lambda()#2}, std::array<char*, 2ul> >(int)") == "tanh"


OPS = ["Pow", "Mul", "Add", "Mul2", "Tanh", "Add2", "Mul3", "Mul4"]
DUR = [10.0, 12.0, 14.0, 10.0, 11.0, 10.0, 14.0, 10.0]  # µs; the shortest is 10


def _ew(name: str) -> str:
    return f"void at::native::vectorized_elementwise_kernel<4, at::native::{name}Functor<float>>(int)"


def _chain(reps: int, grids=None, names=None) -> Program:
    p = Program()
    t = 0.0
    for r in range(reps):
        for i, (op, d) in enumerate(zip(names or OPS, DUR)):
            grid = grids[i] if grids else (4096, 1, 1)
            p.kernel(t + 5, d, launch=(t, 3), name=_ew(op), grid=grid)
            t += d + 5  # 5 µs between kernels (≤ 100 µs: one chain)
    return p


def test_unfused_elementwise_on_a_hand_made_chain(analyze_doc) -> None:
    f = analyze_doc(_chain(3)).get("unfused_elementwise")
    assert f is not None
    # 3 repetitions of 8 ops: 24 kernels, 3 x 91 µs; fused: 3 kernels of the shortest (10 µs)
    assert f["count"] == 24
    assert f["wasted_ns"] == 3 * (sum(DUR) - 10.0) * 1000
    # different launch shapes are not one chain; one op repeated is not a fusion chain
    grids = [(4096, 1, 1), (2048, 1, 1)] * 4
    assert "unfused_elementwise" not in analyze_doc(_chain(3, grids=grids))
    assert "unfused_elementwise" not in analyze_doc(_chain(3, names=["Mul"] * 8))


def _legacy(wait_event: bool = False, legacy_stream: int = 7, reps: int = 3) -> Program:
    """A's long kernel on stream 13, B's kernels on 14, a small op on `legacy_stream` in between."""
    p = Program()
    for r in range(reps):
        o = 2000.0 * r
        p.kernel(o + 20, 1000, launch=(o + 10, 5), stream=13, name="long_a")
        p.kernel(o + 30, 200, launch=(o + 20, 5), stream=14, name="b_kernel")
        p.kernel(o + 1022, 2, launch=(o + 30, 5), stream=legacy_stream, name="small_op")
        if wait_event:
            p.api("cudaStreamWaitEvent", o + 36, 2)
        p.kernel(o + 1026, 200, launch=(o + 40, 5), stream=14, name="b_kernel")
    return p


def test_implicit_default_stream_sync_on_a_hand_made_program(analyze_doc) -> None:
    f = analyze_doc(_legacy()).get("implicit_default_stream_sync")
    assert f is not None
    # each small op starts 2 µs after A's long kernel ends (launched long before: it was ready) and B's
    # next kernel, ready since B's previous one ended at +230 µs, starts 2 µs after it: held 796 µs
    assert f["count"] == 3
    assert f["wasted_ns"] == 3 * (1026 - 230) * 1000
    h = f["data"]["handoffs"][0]
    assert (h["legacy_stream"], h["waited_for_stream"], h["held_stream"]) == (7, 13, 14)
    # an explicit cudaStreamWaitEvent between the launches: a declared dependency, not implicit
    assert "implicit_default_stream_sync" not in analyze_doc(_legacy(wait_event=True))
    # the same timing on an ordinary stream: not the legacy default stream
    assert "implicit_default_stream_sync" not in analyze_doc(_legacy(legacy_stream=15))
