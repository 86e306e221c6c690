"""Issue 11, "silent wrong numbers": values that used to wrap or be cast without a word are now dropped
(or made unknown) and counted in the run's notes with an example; the numbers that remain are the
ones a hand computation gives."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from hostile_util import (
    analyze_json,
    cli,
    kernel,
    kineto_doc,
    launch,
    loosen,
    nsys_copy,
    sql,
    two_kernels,
    write_json,
)

from tracelab.io import load_trace


@pytest.mark.parametrize("ts", [1e19, 1e300, 2**64, -1e19])
def test_huge_timestamps_are_dropped_not_wrapped(tmp_path, ts):
    p = write_json(
        tmp_path / "t.json", kineto_doc([*two_kernels(), launch(1026, 3), kernel(ts, 1, 3, name="wrap")])
    )
    tl = load_trace(p)
    gpu = tl.gpu_events()
    assert sorted(tl.names(gpu["name"])) == ["k1", "k2"]
    assert gpu["start"].min() == 1_000_000 and gpu["end"].max() == 1_025_000
    assert any("outside the valid range" in n and "'wrap'" in n for n in tl.meta.notes), tl.meta.notes


@pytest.mark.parametrize("value", [True, False, "12", [1], {"a": 1}])
def test_timestamp_of_the_wrong_type_is_not_a_number(tmp_path, value):
    """`ts: true` used to become 1 µs. A bool, list or object is no timestamp (the event is skipped and
    counted); a numeric string is read as the number it spells."""
    p = write_json(
        tmp_path / "t.json", kineto_doc([*two_kernels(), launch(1026, 3), kernel(value, 1, 3, name="odd")])
    )
    tl = load_trace(p)
    gpu = tl.gpu_events()
    names = sorted(tl.names(gpu["name"]))
    if value == "12":
        assert names == ["k1", "k2", "odd"] and gpu["start"].min() == 12_000
    else:
        assert names == ["k1", "k2"]
        assert gpu["start"].min() == 1_000_000
        assert any("without a timestamp" in n for n in tl.meta.notes), tl.meta.notes


@pytest.mark.parametrize("device", [2**32 + 1, 2**32, -5, 1.5, True, [1], {"id": 1}])
def test_device_that_does_not_fit_is_never_counted_as_another(tmp_path, device):
    """device 2^32+1 used to be counted as device 1 (int32 wrap); 1.5 and true were cast to 1."""
    events = [*two_kernels(), launch(1026, 3), kernel(1030, 4, 3, name="odd", device=device)]
    tl = load_trace(write_json(tmp_path / "t.json", kineto_doc(events)))
    gpu = tl.gpu_events()
    assert set(gpu["device"].tolist()) <= {0}
    assert 1 not in {d.device for d in tl.devices}


def test_kernel_placed_on_pid_lane_when_device_fails_is_on_device_of_pid(tmp_path):
    """A device that is not an integer counts as missing: the kernel goes on its pid/tid lane (pid 0,
    tid 7 here) with a note, never on a device derived from the bad value."""
    events = [*two_kernels(), launch(1026, 3), kernel(1030, 4, 3, name="odd", device=1.5)]
    tl = load_trace(write_json(tmp_path / "t.json", kineto_doc(events)))
    odd = tl.events[tl.names(tl.events["name"]) == "odd"]
    assert odd["device"].tolist() == [0] and odd["stream"].tolist() == [7]
    assert any("placed on the lane of their pid" in n for n in tl.meta.notes)


def _independent_span(path) -> tuple[int, int]:
    """(first start, last end) of GPU work straight from the export, rows with a NULL start left out."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    lo, hi = [], []
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        a, b = conn.execute(f'SELECT min(start), max("end") FROM {t} WHERE start IS NOT NULL').fetchone()
        lo.append(a)
        hi.append(b)
    conn.close()
    return min(lo), max(hi)


def test_null_kernel_start_in_nsys_is_dropped_not_minus_one(tmp_path):
    """A NULL kernel start used to become -1 ns and stretch 5.8 µs of busy time into 1.52 s."""
    p = nsys_copy(tmp_path / "t.sqlite")
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    sql(p, loosen(k) + f"UPDATE {k} SET start = NULL WHERE rowid = (SELECT min(rowid) FROM {k});")
    first, last = _independent_span(p)
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    doc = analyze_json(tmp_path / "s.db", res.stdout.split()[0])
    (dev,) = doc["devices"]
    assert dev["span_ns"] == last - first
    tl = load_trace(p)
    assert any("time outside the valid range" in n and "start -1 ns" in n for n in tl.meta.notes), (
        tl.meta.notes
    )


def test_nsys_device_id_beyond_int32_is_dropped_not_wrapped(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    sql(p, loosen(k) + f"UPDATE {k} SET deviceId = 4294967297 WHERE rowid = (SELECT min(rowid) FROM {k});")
    tl = load_trace(p)
    assert {d.device for d in tl.devices} == {0}
    assert any("device id outside" in n and "4294967297" in n for n in tl.meta.notes)
    n_kernels = sqlite3.connect(p).execute(f"SELECT count(*) FROM {k}").fetchone()[0]
    assert int((tl.events["kind"] == 0).sum()) == n_kernels - 1


def test_nsys_grid_beyond_int32_becomes_unknown(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    sql(p, loosen(k) + f"UPDATE {k} SET gridX = 4294967297;")
    tl = load_trace(p)
    kern = tl.events[tl.events["kind"] == 0]
    assert (kern["grid_x"] == -1).all()
    assert any("grid_x values outside the int32 range" in n for n in tl.meta.notes)


@pytest.mark.parametrize(("value", "first"), [(-5, "-5"), (2**31, "2147483648"), (-(2**31) - 1, "-2147483649")])
def test_nsys_launch_attribute_out_of_range_on_one_kernel(tmp_path, value, first):
    """One kernel's registers out of [-1, 2^31): that value alone becomes unknown, with a note naming it;
    the other kernels keep theirs (the merge keeps such a column int64 until it is checked)."""
    p = nsys_copy(tmp_path / "t.sqlite")
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    sql(p, loosen(k) + f"UPDATE {k} SET registersPerThread = {value} WHERE rowid = (SELECT min(rowid) FROM {k});")
    tl = load_trace(p)
    kern = tl.events[tl.events["kind"] == 0]
    regs = kern["registers"].to_numpy()
    assert kern["registers"].dtype == np.int32
    assert int((regs == -1).sum()) == 1 and int(regs.min()) >= -1
    assert any(f"1 registers values outside the int32 range (first: {first})" in n for n in tl.meta.notes)
