"""comm_overlap (issue 15) without two GPUs: the workload's plumbing on the CPU, and the analysis on a
synthetic two-rank run built from real one-GPU recordings.

The synthetic runs: the bundled H200 `green_contexts` torch.profiler recordings (sequential / streams /
green_ctx) become rank 0; rank 1 is the same trace shifted by 5 µs; the elementwise `sigmoid_kernel`
launches are renamed to an NCCL all-reduce kernel, so they play the communication phase on their
stream / 16-SM green context, exactly where the workload puts NCCL. Every expected figure is computed
here from the JSON we wrote, with plain Python (sorting and sweeping), not with tracelab's interval
code.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tracelab.analyses.ranks.comm_partition import comm_overlap_explanation, has_comm, rank_comm
from tracelab.demo import demo_run
from tracelab.errors import BadInput
from tracelab.io.detect import load_run_dir
from tracelab.record.process import check_world
from tracelab.record.workload import build_command
from tracelab.render.text.comm import explain_comm_overlap
from tracelab.workloads import get_workload

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SHIFT_US = 5.0
ROOT = Path(__file__).resolve().parents[1]


# ---- the workload's plumbing -----------------------------------------------------------------
def test_workload_listed_with_three_variants_and_two_ranks():
    wl = get_workload("comm_overlap")
    assert wl.variant_names() == ("sequential", "streams", "green_ctx")
    assert wl.world_size == 2
    assert wl.parameters(True)["comm_sms"] == 24
    out = subprocess.run(
        [sys.executable, "-m", "tracelab", "workloads", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    doc = json.loads(out.stdout)
    entry = next(w for w in doc if w["name"] == "comm_overlap")
    assert entry["world_size"] == 2


def test_record_command_launches_one_process_per_gpu_through_torchrun():
    cmd = build_command("comm_overlap", "green_ctx", "nsys", True, "/tmp/run", nsys="nsys")
    i = cmd.index("torch.distributed.run")
    assert cmd[i - 1] == "-m" and "--nproc-per-node=2" in cmd
    assert cmd[cmd.index("--nproc-per-node=2") + 1 : cmd.index("--nproc-per-node=2") + 3] == [
        "-m",
        "tracelab.workloads.runner",
    ]
    assert "--sample=none" in cmd and cmd[0] == "nsys"
    # a one-process workload is not wrapped
    assert "torch.distributed.run" not in build_command("pdl", "pdl", "torch", True, "/tmp/run")


def test_two_rank_workload_refuses_one_gpu_unless_gloo():
    with pytest.raises(BadInput, match="2 processes, one per GPU, but 1 GPU"):
        check_world("comm_overlap", 2, {"dist_backend": "nccl"}, gpus=1)
    check_world("comm_overlap", 2, {"dist_backend": "gloo"}, gpus=1)  # one GPU, no NCCL kernels
    check_world("comm_overlap", 2, {"dist_backend": "nccl"}, gpus=2)


def test_multicast_stays_off_in_recorded_programs():
    from tracelab.record.process import program_env

    env = program_env(None)
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"


# ---- synthetic two-rank runs -------------------------------------------------------------------
def _ns(ts: float) -> int:
    whole = math.floor(ts)
    return int(whole) * 1000 + round((ts - whole) * 1000)


def make_two_rank(src: Path, dst: Path) -> Path:
    meta = json.loads((src / "meta.json").read_text())
    trace = json.loads(gzip.decompress((src / "trace.json.gz").read_bytes()))
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("name") == "sigmoid_kernel":
            e["name"] = NCCL
    (dst / "ranks").mkdir(parents=True)
    for rank in (0, 1):
        t = copy.deepcopy(trace)
        t["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        if rank:
            for e in t["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + SHIFT_US
        (dst / "ranks" / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(t).encode()))
    meta.pop("probe", None)
    meta.update(workload="comm_overlap", trace_file="ranks", world_size=2)
    (dst / "meta.json").write_text(json.dumps(meta))
    return dst


def raw_kernels(run: Path, rank: int) -> list[tuple[str, int, int]]:
    t = json.loads(gzip.decompress((run / "ranks" / f"rank{rank}.json.gz").read_bytes()))
    out = []
    for e in t["traceEvents"]:
        if e.get("cat") == "kernel" and not e["name"].startswith("tl_probe_"):
            s = _ns(e["ts"])
            out.append((e["name"], s, s + round(e["dur"] * 1000), e["args"]["grid"]))
    return out


def union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    total = 0
    for s1, e1 in a:  # small lists: the plain quadratic sum is the independent check
        for s2, e2 in b:
            total += max(0, min(e1, e2) - max(s1, s2))
    return total


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("comm")
    return {
        v: make_two_rank(demo_run(f"green_contexts-{v}-torch", cache=base / "cache"), base / v)
        for v in ("sequential", "streams", "green_ctx")
    }


@pytest.mark.parametrize("variant", ["sequential", "streams", "green_ctx"])
def test_per_rank_compute_comm_overlap_matches_a_sweep_over_the_raw_json(runs, variant):
    tl = load_run_dir(runs[variant])
    assert sorted(set(tl.events["rank"].tolist())) == [0, 1]
    assert has_comm(tl)
    rows = rank_comm(tl)
    assert [(r.rank, r.device) for r in rows] == [(0, 0), (1, 0)]
    for r in rows:
        ks = raw_kernels(runs[variant], r.rank)
        comm = union([(s, e) for n, s, e, _ in ks if n == NCCL])
        comp = union([(s, e) for n, s, e, _ in ks if n != NCCL])
        assert r.comm_ns == sum(e - s for s, e in comm)
        assert r.compute_ns == sum(e - s for s, e in comp)
        assert r.overlap_ns == overlap(comm, comp)
        assert r.comm_kernels == sum(1 for n, *_ in ks if n == NCCL)
        assert r.comm_kernel_ns == sum(e - s for n, s, e, _ in ks if n == NCCL)
    if variant == "sequential":  # one stream: nothing can overlap
        assert all(r.overlap_ns == 0 for r in rows)
    else:
        assert all(r.overlap_ns > 0 for r in rows)


def test_nccl_sms_are_the_grid_clipped_to_the_comm_partition(runs):
    meta = json.loads((runs["green_ctx"] / "meta.json").read_text())
    small = next(p for p in meta["partitions"] if p["marker"] == "tl_probe_small_partition")
    grids = [g[0] * g[1] * g[2] for n, _s, _e, g in raw_kernels(runs["green_ctx"], 0) if n == NCCL]
    for r in rank_comm(load_run_dir(runs["green_ctx"])):
        assert r.comm_partition_sms == small["sm_count"] == 16
        assert r.comm_sms == min(max(grids), 16)
        assert r.comm_green_context is not None and r.comm_green_context != r.compute_green_context
        assert r.compute_partition_sms == 116
    seq = rank_comm(load_run_dir(runs["sequential"]))
    assert all(r.comm_partition_sms == 132 and r.comm_sms == min(max(grids), 132) for r in seq)


def test_collectives_match_across_ranks_with_skew_and_last_rank(runs):
    """The cross-rank matching (tracelab.analyses.ranks.collectives) on the synthetic pair: rank 1 is the
    same run 5 µs later, so every all-reduce has a 5 µs skew and rank 1 arrives last."""
    from tracelab.analyses.ranks.collectives import match_collectives

    tl = load_run_dir(runs["streams"])
    m = match_collectives(tl)
    k0 = sorted(s for n, s, _e, _g in raw_kernels(runs["streams"], 0) if n == NCCL)
    k1 = sorted(s for n, s, _e, _g in raw_kernels(runs["streams"], 1) if n == NCCL)
    skews = [b - a for a, b in zip(k0, k1)]
    assert len(m.calls) == len(k0) == len(k1) == 48 and m.unmatched == 0
    assert all(4_999 <= s <= 5_001 for s in skews)  # the 5 µs shift, to the rounding of float µs
    assert sorted(c.skew_ns for c in m.calls) == sorted(skews)
    assert all(c.last_rank == 1 for c in m.calls)
    e = comm_overlap_explanation(tl, tl)
    assert e.variant_skew_ns == round(sum(skews) / len(skews))


def test_explanation_green_ctx_against_streams(runs):
    v, b = load_run_dir(runs["green_ctx"]), load_run_dir(runs["streams"])
    e = comm_overlap_explanation(v, b, "green_ctx", "streams")
    vr, br = rank_comm(v), rank_comm(b)
    v_span, b_span = max(r.span_ns for r in vr), max(r.span_ns for r in br)
    assert e.ratio == pytest.approx(v_span / b_span)
    # the recordings: green_ctx is 1.2x slower than sequential on the H200 (README); against streams too
    assert e.verdict == "slowdown" and e.ratio > 1.05
    assert e.partitioned
    # the 16-SM partition runs the "communication": it covers most of the span and sets the pace
    comm_busy = sum(r.comm_ns / r.span_ns for r in vr) / 2
    comp_busy = sum(r.compute_ns / r.span_ns for r in vr) / 2
    assert e.pace == ("comm" if comm_busy > comp_busy else "compute") == "comm"
    assert e.pace_busy_fraction == pytest.approx(comm_busy)
    assert e.comm_ratio == pytest.approx(
        sum(r.comm_kernel_ns for r in vr) / sum(r.comm_kernel_ns for r in br)
    )
    text = explain_comm_overlap(e)
    assert "green_ctx is" in text and "slower than streams" in text
    assert "does not pay for itself" in text and "comm side sets the pace" in text
    assert "116 SMs compute / 16 SMs communication" in text


def test_explanation_of_sequential_against_itself_is_the_same(runs):
    tl = load_run_dir(runs["sequential"])
    e = comm_overlap_explanation(tl, tl)
    assert e.verdict == "same" and e.ratio == 1.0 and not e.partitioned
    assert "takes as long as" in explain_comm_overlap(e)


# ---- a real two-process recording (H100, torchrun, gloo: two ranks on one GPU) -----------------
@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory) -> Path:
    import tarfile

    d = tmp_path_factory.mktemp("gloo")
    with tarfile.open(ROOT / "tests" / "data" / "comm_overlap_gloo_h100.tar.xz") as tf:
        tf.extractall(d, filter="data")
    return d


def _kernels(tl, name_prefix: str):
    from tracelab.model import EventKind

    ev = tl.events
    ids = [i for i, s in enumerate(tl.strings) if s.startswith(name_prefix)]
    return ev[(ev["kind"] == int(EventKind.KERNEL)) & ev["name"].isin(ids)]


@pytest.mark.parametrize("variant", ["sequential", "streams", "green_ctx"])
def test_torchrun_per_rank_traces_load_as_two_ranks(gloo_runs, variant):
    run = gloo_runs / f"comm_overlap-{variant}-torch-gloo"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["trace_file"] == "ranks"
    assert sorted(p.name for p in (run / "ranks").iterdir()) == ["rank0.json.gz", "rank1.json.gz"]
    assert (run / "meta_rank1.json").is_file()
    tl = load_run_dir(run)
    assert sorted(set(tl.events["rank"].tolist())) == [0, 1]
    gemm = _kernels(tl, "nvjet_")
    per_rank = gemm.groupby("rank").size().to_dict()
    steps, matmuls = meta["params"]["steps"], meta["params"]["matmuls"]
    assert per_rank == {0: steps * matmuls, 1: steps * matmuls}
    # gloo reduces on the host: no NCCL kernel, so the comm/partition explanation does not apply
    assert not has_comm(tl)
    assert all(r.comm_ns == 0 and r.comm_kernels == 0 for r in rank_comm(tl))


def test_green_ctx_partitions_on_both_ranks_torch_and_nsys(gloo_runs):
    tl = load_run_dir(gloo_runs / "comm_overlap-green_ctx-torch-gloo")
    sms = {(c.rank, c.green_context): c.sm_count for c in tl.contexts if c.is_green}
    gemm = _kernels(tl, "nvjet_")
    small = _kernels(tl, "tl_probe_small_partition")
    for rank in (0, 1):
        g = set(gemm[gemm["rank"] == rank]["green_context"].tolist())
        s = set(small[small["rank"] == rank]["green_context"].tolist())
        assert len(g) == 1 and len(s) == 1 and g != s
        assert sms[(rank, g.pop())] == 132 - 24 and sms[(rank, s.pop())] == 24
    for r in rank_comm(tl):
        assert r.compute_partition_sms == 108
    nsys = load_run_dir(gloo_runs / "comm_overlap-green_ctx-nsys-gloo")
    # one export of both processes (two ranks on one GPU over gloo): one rank per process (issue 24),
    # each rank's GEMMs in its own 108-SM green context
    assert nsys.meta.ranks == (0, 1)
    assert any("2 processes used GPUs: one rank each" in n for n in nsys.meta.notes)
    g = _kernels(nsys, "nvjet_")
    assert len(g) == 2 * 3 * 4
    for rank in (0, 1):
        gc = set(g[g["rank"] == rank]["green_context"].tolist())
        assert len(gc) == 1
        assert {c.sm_count for c in nsys.contexts if c.rank == rank and c.green_context in gc} == {108}
        assert sorted(c.sm_count for c in nsys.contexts if c.is_green and c.rank == rank) == [24, 108]


def test_compare_explains_compute_and_communication(runs, tmp_path):
    """`tracelab compare` of two communicating runs: the explanation in the text and in --json."""
    from click.testing import CliRunner

    from tracelab.cli import main

    db = str(tmp_path / "t.db")
    res = CliRunner().invoke(
        main, ["--db", db, "compare", str(runs["streams"]), str(runs["green_ctx"]), "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["comparison"]["comm_overlap"]
    e = comm_overlap_explanation(load_run_dir(runs["green_ctx"]), load_run_dir(runs["streams"]))
    assert doc["ratio"] == pytest.approx(e.ratio) and doc["pace"] == "comm" and doc["partitioned"]
    assert doc["message"] == explain_comm_overlap(e)
    res = CliRunner().invoke(main, ["--db", db, "compare", str(runs["streams"]), str(runs["green_ctx"])])
    assert res.exit_code == 0, res.output
    assert "== compute / communication (B against A)" in res.stdout
    assert "does not pay for itself" in " ".join(res.stdout.split())
    assert all(len(line) <= 100 for line in res.stdout.splitlines())
    # without communication kernels (the gloo runs, or plain green_contexts) there is none
    from tracelab.analyses.compare import compare
    from tracelab.analyses.pipeline import analyze

    a = load_run_dir(demo_run("green_contexts-sequential-torch", cache=tmp_path / "c"))
    b = load_run_dir(demo_run("green_contexts-green_ctx-torch", cache=tmp_path / "c"))
    c = compare(analyze(a), analyze(b), a, b)
    assert c.comm_overlap is None and c.green_contexts is not None
