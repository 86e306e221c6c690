"""Every finding rule on hand-made programs, both formats, through the CLI; answers computed by hand."""

from __future__ import annotations

import pytest
from trace_builder import Program

US = 1000  # ns per µs


def rules(doc: dict) -> dict[str, dict]:
    return {f["rule"]: f for f in doc["findings"]}


def item_loop(n_steps: int, syncs_per_step: int = 0) -> Program:
    """n_steps marked steps of 1000 µs: a kernel [t+10, t+310) launched at t, then a `.item()` (a DtoH
    copy into pageable memory at [t+310, t+312) whose cudaMemcpyAsync [t+20, t+315) blocks), then
    syncs_per_step cudaStreamSynchronize calls of 5 µs at t+400, t+410, ... The GPU is idle from t+312
    to the next step's kernel at t+1010: 698 µs per step, 4 x 698 ... between steps."""
    p = Program()
    for i in range(n_steps):
        t = i * 1000.0
        p.step(t, t + 900)
        p.kernel(t + 10, 300, launch=(t, 4))
        p.memcpy(t + 310, 2, "DtoH", "Device", "Pageable", 4, launch=(t + 20, 295))
        for k in range(syncs_per_step):
            p.api("cudaStreamSynchronize", t + 400 + 10 * k, 5)
    return p


def test_sync_per_iteration_counts_steps_and_waste(run):
    doc = run(item_loop(4))
    f = rules(doc)["sync_per_iteration"]
    assert f["count"] == 4 and f["data"]["steps"] == 4
    # host_sync idle starting inside the 4 syncing steps: the gaps [t+312, t+1010) of steps 0..2 (698 µs
    # each; the copy's call was waiting when the GPU went idle); step 3's copy ends the trace
    assert f["wasted_ns"] == 3 * 698 * US
    assert [s["source"] for s in doc["steps"]] == ["marked"] * 4
    assert [(s["end_ns"] - s["start_ns"]) for s in doc["steps"]] == [900 * US] * 4


def test_sync_per_iteration_not_evaluated_is_a_note(run):
    # 5 blocking syncs, no markers, and no repeating launch sequence to infer steps from (a different
    # number of differently named kernels before each sync; a periodic loop gets inferred steps)
    p = Program()
    for i in range(5):
        t = i * 1000.0
        for j in range(i + 1):
            p.kernel(t + 10 + 60 * j, 50, launch=(t + 5 * j, 4), name=f"k{i}_{j}")
        p.api("cudaDeviceSynchronize", t + 400, 295)
    doc = run(p)
    assert "sync_per_iteration" not in rules(doc)
    assert any(n.startswith("sync_per_iteration not evaluated: rank 0: 5 blocking host syncs") for n in doc["notes"])


def test_excessive_sync_more_syncs_than_steps(run):
    doc = run(item_loop(3, syncs_per_step=2))
    f = rules(doc)["excessive_sync"]
    # 3 steps x 2 cudaStreamSynchronize = 6 blocking calls > 3 steps (the .item() copies are async calls)
    assert f["count"] == 6 and f["data"]["steps"] == 3 and f["data"]["ranks"] == [
        {"rank": 0, "steps": 3, "syncs": 6, "idle_ns": f["wasted_ns"]}
    ]
    # every call [t+400+10k, t+405+10k) lies in the idle [t+312, t+1010) of steps 0 and 1; in step 2 the
    # device's span ended at 2312: 4 calls x 5 µs
    assert f["wasted_ns"] == 4 * 5 * US
    assert "excessive_sync" not in rules(run(item_loop(3, syncs_per_step=0)))


def test_pageable_memcpy_large_copy(run):
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    p.memcpy(100, 80, "HtoD", "Pageable", "Device", 1 << 20, launch=(95, 4))
    p.memcpy(180, 5, "HtoD", "Pageable", "Device", 1024, launch=(96, 4))  # < 64 KiB: staged, not counted
    f = rules(run(p))["pageable_memcpy"]
    # no pinned copies to compare with: the whole 80 µs is the upper bound
    assert (f["count"], f["wasted_ns"], f["data"]["bytes"]) == (1, 80 * US, 1 << 20)


def test_launch_bound_stretch(run):
    p = Program()
    for i in range(40):  # 40 kernels of 2 µs, one every 8 µs: 6 µs idle between launches
        p.kernel(i * 8, 2, launch=(i * 8 - 3, 2))
    f = rules(run(p))["launch_bound"]
    # one stretch [0, 314): 39 idle intervals of 6 µs = 234 µs idle (74.5% of it)
    assert (f["count"], f["wasted_ns"], f["data"]["n_stretches"]) == (40, 234 * US, 1)


def test_serialized_copy_compute(run):
    p = Program()
    for i in range(3):  # copy [t, t+100) then kernel [t+100, t+300), one stream, pinned
        t = i * 300.0
        p.memcpy(t, 100, "HtoD", "Pinned", "Device", 1 << 20, launch=(t - 10, 4))
        p.kernel(t + 100, 200, launch=(t - 5, 4))
    f = rules(run(p))["serialized_copy_compute"]
    # 3 copies of 100 µs overlap no compute: 300 µs, below the 600 µs of compute
    assert (f["count"], f["wasted_ns"]) == (3, 300 * US)
    assert f["data"]["streams"] == [
        {"rank": 0, "device": 0, "stream": 7, "copies": 3, "copy_ns": 300 * US, "unoverlapped_ns": 300 * US}
    ]


def test_pdl_overlaps(run):
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    p.kernel(90, 100, launch=(-15, 4))  # starts 10 µs before its predecessor ends
    p.kernel(185, 100, launch=(-10, 4))  # 5 µs
    f = rules(run(p))["pdl"]
    assert (f["count"], f["wasted_ns"], f["data"]["overlap_ns"], f["data"]["overlapping_pairs"]) == (
        2, 0, 15 * US, 2
    )


def test_gap_threshold_changes_no_wasted_ns(run):
    """--gap-threshold-us is a display knob: the findings' wasted_ns come from every idle interval."""
    p = item_loop(4)
    p.memcpy(3500, 5, "HtoD", "Pinned", "Device", 1 << 20, launch=(3495, 50, "cudaMemcpy"))
    docs = [run(p, "--gap-threshold-us", t) for t in ("0.001", "10", "1000")]
    wasted = [{f["rule"]: (f["wasted_ns"], f["severity"]) for f in d["findings"]} for d in docs]
    assert wasted[0] == wasted[1] == wasted[2]
    assert {"sync_per_iteration", "sync_memcpy"} <= set(wasted[0])
    assert [len(d["gaps"]) for d in docs][2] == 0  # no 1 ms gap is shown, yet the findings keep their waste


@pytest.mark.parametrize("fmt", ["nsys"])  # Kineto traces carry no green contexts
def test_idle_partition_green_context(run):
    p = Program()
    p.kernel(0, 1000, launch=(-20, 4), grid=(264, 1, 1))  # outside every green context, [0,1000)
    p.kernel(0, 10, launch=(-10, 4), stream=9, grid=(32, 1, 1), green_context=5)  # green context 5, 10 µs
    f = rules(run(p))["idle_partition"]
    # no SM count recorded for green context 5: it holds the SMs no other one holds, all 132. Its kernel of
    # 32 blocks occupies 32 SMs for 10 µs: busy 320 SM-µs of 132 x 1000; idle 131 680 SM-µs = 997.58 µs of
    # whole-device time
    (part,) = f["data"]["partitions"]
    assert part["busy_fraction"] == pytest.approx(320 / 132_000, abs=1e-6)
    assert (f["count"], f["wasted_ns"], f["severity"]) == (1, round(131_680 * US / 132), "critical")


def test_steps_scope_restricts_every_figure(run):
    """--steps 1:3 of item_loop(4): steps 1 and 2, [1000, 2900) µs. Inside: kernels [1010,1310) and
    [2010,2310), copies [1310,1312) and [2310,2312): span 1302 µs, busy 604 µs, one 698 µs gap that begins while the copy's call
    waits (it returns 3 µs in) and is launch_latency after it (issue 24 item 7: no longer host_sync)."""
    doc = run(item_loop(4), "--steps", "1:3")
    (d,) = doc["devices"]
    assert (d["span_ns"], d["busy_ns"], d["idle_ns"]) == (1302 * US, 604 * US, 698 * US)
    assert [(g["duration_ns"], g["cause"]) for g in doc["gaps"]] == [(698 * US, "launch_latency")]
    assert "returned at 3.0 µs into the gap" in doc["gaps"][0]["evidence"]
    assert [s["index"] for s in doc["steps"]] == [1, 2]
    assert any(n.startswith("figures cover rank 0: steps 1–2") for n in doc["notes"])


def test_window_scope(run):
    """--window 1000:2000 µs from the run start (the first event, at 0): kernel [1010,1310) and its copy
    [1310,1312) only."""
    doc = run(item_loop(4), "--window", "1000:2000")
    (d,) = doc["devices"]
    assert (d["span_ns"], d["busy_ns"], doc["gaps"]) == (302 * US, 302 * US, [])


def test_bad_scope_is_one_line_exit_2(tmp_path):
    from click.testing import CliRunner

    from tracelab.cli import main

    path = item_loop(4).kineto(tmp_path / "t.json")
    r = CliRunner().invoke(main, ["analyze", str(path), "--steps", "3:1"])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "--steps" in r.stderr
