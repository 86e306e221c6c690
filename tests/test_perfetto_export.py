"""`tracelab export`: Chrome trace-event JSON for Perfetto / chrome://tracing, checked structurally on
bundled H200 runs (Perfetto's trace processor downloads its binary at run time, so it cannot run
offline; the last test uses it when it can). Expected counts come from the analysis and from the
timeline's own columns, tallied here."""

from __future__ import annotations

import os
import re
import sqlite3
from collections import Counter, defaultdict

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from tracelab.api import analyze
from tracelab.cli import main
from tracelab.model import EventKind, LaneKind
from tracelab.render.export.perfetto import write_perfetto
from tracelab.render.export.perfetto_tracks import ROW_TID, overlap_rows
from tracelab.render.text.gap_evidence import gap_evidence

STEP = re.compile(r"^step \d+$")
SM_TRACK = re.compile(r"^SM (\d+) \((measured|estimated)\)( · overlap \d+)?$")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tracelab.demo import demo_archives, demo_run
    from tracelab.io.detect import load_run_dir

    if not demo_archives():
        pytest.skip("no bundled demo runs")
    tmp = tmp_path_factory.mktemp("perfetto")
    out = {}
    for name in ("sync_pitfalls-item_every_step-torch", "green_contexts-green_ctx-nsys", "pdl-pdl-nsys"):
        tl = load_run_dir(demo_run(name, tmp / "cache"))
        an = analyze(tl)
        path = tmp / f"{name}.perfetto.json"
        summary = write_perfetto(path, tl, an)
        out[name] = (tl, an, orjson.loads(path.read_bytes()), summary)
    return out


def _threads(doc) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def _processes(doc) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


@pytest.mark.parametrize("name", ["sync_pitfalls-item_every_step-torch", "green_contexts-green_ctx-nsys", "pdl-pdl-nsys"])
def test_every_event_is_well_formed(exported, name):
    tl, _an, doc, summary = exported[name]
    events = doc["traceEvents"]
    assert doc["otherData"]["origin_ns"] == int(tl.events["start"].min())
    threads = _threads(doc)
    for e in events:
        assert {"ph", "ts", "pid", "tid"} <= e.keys(), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and isinstance(e["name"], str)
        if e["ph"] != "M":
            assert (e["pid"], e["tid"]) in threads  # every track is named
    data = [e for e in events if e["ph"] != "M"]
    assert min(e["ts"] for e in data) == 0  # µs from the run start
    assert len(data) == summary.events
    # no two slices on one track overlap without nesting (Perfetto would drop them)
    by_track = defaultdict(list)
    for e in data:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort(key=lambda x: (x[0], -x[1]))
        stack: list[float] = []
        for s, t in spans:
            while stack and stack[-1] <= s + 1e-6:
                stack.pop()
            assert not stack or t <= stack[-1] + 1e-6
            stack.append(t)


def test_timeline_events_land_on_their_lanes(exported):
    tl, _, doc, _ = exported["sync_pitfalls-item_every_step-torch"]
    ev = tl.events
    # GPU stream lanes: kernels + memcpys + memsets + syncs per stream, tallied from the columns
    lanes = tl.lanes.set_index("lane")
    gpu = ev["lane"].map(lanes["lane_kind"]).to_numpy() == int(LaneKind.GPU_STREAM)
    expected = Counter(ev["stream"].to_numpy()[gpu].tolist())
    threads, processes = _threads(doc), _processes(doc)
    got: Counter[int] = Counter()
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and processes[e["pid"]].startswith("rank 0 · GPU 0"):
            track = threads[(e["pid"], e["tid"] % ROW_TID)]
            m = re.match(r"^stream (\d+) ", track)
            if m:
                got[int(m.group(1))] += 1
            elif track.startswith("all streams"):
                got[-1] += 1
    assert got == expected
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == int((ev["kind"] == int(EventKind.KERNEL)).sum())
    host = [e for e in doc["traceEvents"] if e.get("cat") in ("runtime", "cpu_op")]
    assert len(host) == int(ev["kind"].isin([int(EventKind.RUNTIME), int(EventKind.CPU_OP)]).sum())


def test_gaps_findings_and_steps_tracks(exported):
    tl, an, doc, summary = exported["sync_pitfalls-item_every_step-torch"]
    threads = _threads(doc)
    gaps = [e for e in doc["traceEvents"] if e.get("cat") == "tracelab.gap"]
    assert {threads[(e["pid"], e["tid"])] for e in gaps} == {"idle gaps (tracelab)"}
    assert Counter(e["name"] for e in gaps) == Counter(f"idle ({g.cause})" for g in an.gaps)
    assert sum(e["dur"] for e in gaps) == pytest.approx(sum(g.duration_ns for g in an.gaps) / 1e3)
    longest = max(gaps, key=lambda e: e["dur"])
    g = max(an.gaps, key=lambda g: g.duration_ns)
    assert longest["args"]["evidence"] == gap_evidence(an, [g])[0]
    assert longest["ts"] == pytest.approx((g.start_ns - int(tl.events["start"].min())) / 1e3, abs=1e-3)

    findings = [e for e in doc["traceEvents"] if e.get("cat") == "tracelab.finding"]
    assert len(findings) == len(an.findings) >= 1
    assert all(e["ph"] == "i" for e in findings)
    spi = [e for e in findings if e["name"] == "sync_per_iteration (warning)"]
    assert len(spi) == 1 and spi[0]["args"]["count"] == 20
    assert spi[0]["args"]["message"] == next(f.message for f in an.findings if f.rule == "sync_per_iteration") != ""

    steps = [e for e in doc["traceEvents"] if e.get("cat") == "tracelab.step"]
    names = tl.names(tl.events["name"].to_numpy())
    marked = (tl.events["kind"].to_numpy() == int(EventKind.NVTX_RANGE)) & np.array(
        [bool(STEP.match(n)) for n in names])
    assert len(steps) == int(marked.sum()) == 20
    assert {threads[(e["pid"], e["tid"])] for e in steps} == {"steps (rank 0)"}
    assert summary.tracks["tracelab / steps (rank 0)"] == 20
    assert summary.tracks["tracelab / findings"] == len(an.findings)


def test_sm_lanes_say_measured_or_estimated(exported):
    from tracelab.analyses.sm.summary import sm_lanes

    tl, _, doc, _summary = exported["green_contexts-green_ctx-nsys"]
    threads = _threads(doc)
    sm_events = [e for e in doc["traceEvents"] if e.get("cat", "").startswith("sm.")]
    tracks = {threads[(e["pid"], e["tid"])] for e in sm_events}
    assert all(SM_TRACK.match(t) for t in tracks)
    measured_sms = {int(SM_TRACK.match(t).group(1)) for t in tracks if "(measured)" in t}
    assert measured_sms == set(np.unique(tl.sm_blocks["sm"].to_numpy()).tolist())  # 116 + 16 = 132 SMs
    assert len(measured_sms) == 132
    lanes, source = sm_lanes(tl, 0, 0)
    assert source == "measured"
    per_source = Counter(e["cat"] for e in sm_events)
    rows = (lanes["sm_last"] - lanes["sm_first"] + 1).to_numpy()
    assert per_source["sm.measured"] == int(rows[lanes["measured"].to_numpy()].sum())
    assert per_source["sm.estimated"] == int(rows[~lanes["measured"].to_numpy()].sum())


def test_overlapping_kernels_get_their_own_row(exported):
    """PDL kernels start before their predecessor ends: they move to an extra row, none is lost."""
    tl, _, doc, _summary = exported["pdl-pdl-nsys"]
    threads = _threads(doc)
    rows = [t for t in threads.values() if t.startswith("stream ") and "overlap" in t]
    assert rows
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == int((tl.events["kind"] == int(EventKind.KERNEL)).sum())


def test_overlap_rows_by_hand():
    keys = np.array([1, 1, 1, 2, 2])
    start = np.array([0, 5, 12, 0, 3])
    end = np.array([10, 15, 20, 2, 4])
    # track 1: [0,10] row 0, [5,15] overlaps -> row 1, [12,20] starts after 10 -> row 0; track 2 clean
    assert overlap_rows(keys, start, end).tolist() == [0, 1, 0, 0, 0]
    assert overlap_rows(np.array([3]), np.array([0]), np.array([1])).tolist() == [0]


def test_cli_export_by_run_name(tmp_path, monkeypatch, exported):
    from tracelab.demo import demo_run

    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "s.db"))
    cli = CliRunner()
    assert cli.invoke(main, ["import", str(demo_run("pdl-pdl-nsys", tmp_path / "c"))]).exit_code == 0
    out = tmp_path / "pdl.perfetto.json"
    r = cli.invoke(main, ["export", "pdl/pdl/nsys", "-o", str(out), "--no-sm-lanes"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(out)
    doc = orjson.loads(out.read_bytes())
    assert not any(e.get("cat", "").startswith("sm.") for e in doc["traceEvents"])
    assert not list(tmp_path.glob(".pdl.perfetto.json.*"))  # no temporary file left behind


def test_cli_export_leaves_per_sm_lanes_out_unless_asked(tmp_path, monkeypatch):
    """Per-SM lanes are most of an export (one lane per SM): `export` adds them with --sm-lanes only;
    --no-sm-lanes (the default) still works. Counted against the run's own event table."""
    from tracelab.demo import demo_run

    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "s.db"))
    cli = CliRunner()
    assert cli.invoke(main, ["import", str(demo_run("green_contexts-green_ctx-nsys", tmp_path / "c"))]).exit_code == 0
    docs = {}
    for flags in ([], ["--no-sm-lanes"], ["--sm-lanes"]):
        out = tmp_path / f"g{len(docs)}.perfetto.json"
        r = cli.invoke(main, ["export", "green_contexts/green_ctx/nsys", "-o", str(out), *flags])
        assert r.exit_code == 0, r.output
        docs[" ".join(flags)] = orjson.loads(out.read_bytes())["traceEvents"]
    sm = {k: sum(e.get("cat", "").startswith("sm.") for e in v) for k, v in docs.items()}
    assert sm[""] == sm["--no-sm-lanes"] == 0 and sm["--sm-lanes"] > 0
    assert len(docs[""]) == len(docs["--no-sm-lanes"])
    with sqlite3.connect(tmp_path / "s.db") as c:
        (events,) = c.execute("SELECT events FROM runs").fetchone()
    assert len(docs[""]) < 3 * events < len(docs["--sm-lanes"])  # the lanes were most of the export


def test_perfetto_trace_processor_loads_it(exported, tmp_path):
    """Perfetto's own trace processor reads the export: one slice per complete event. The `perfetto`
    package holds no trace processor; it downloads `trace_processor_shell` from Google's storage on
    first use, which this machine and CI cannot reach (docs/DECISIONS.md, "Perfetto export"), so this
    runs only where the binary is there: PERFETTO_TP_BIN, or the package's cache of an earlier download."""
    tp_mod = pytest.importorskip("perfetto.trace_processor")
    _, _, doc, _ = exported["sync_pitfalls-item_every_step-torch"]
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc))
    binary = os.environ.get("PERFETTO_TP_BIN")
    try:
        config = tp_mod.TraceProcessorConfig(bin_path=binary) if binary else None
        tp = tp_mod.TraceProcessor(trace=str(path), config=config) if config else tp_mod.TraceProcessor(trace=str(path))
    except Exception as exc:  # noqa: BLE001 (the binary is downloaded on first use: offline, it cannot start)
        pytest.skip(f"perfetto's trace_processor_shell is not installed and cannot be downloaded here: {exc}")
    n = next(iter(tp.query("select count(*) as n from slice"))).n
    assert n == sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
    tp.close()


def test_launch_arrows_link_each_launch_to_its_gpu_work(exported):
    from tracelab.model import Flag

    tl, _, doc, summary = exported["sync_pitfalls-item_every_step-torch"]
    ev = tl.events
    launches = {(int(r), int(c)) for r, c, f in zip(ev["rank"], ev["correlation"], ev["flags"])
                if f & Flag.LAUNCH and c >= 0}
    gpu = ev[ev["kind"].isin([int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)])]
    linked = {(int(r), int(c)) for r, c in zip(gpu["rank"], gpu["correlation"]) if c >= 0} & launches
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    ends = [e for e in doc["traceEvents"] if e["ph"] == "f"]
    assert len(starts) == len(ends) == len(linked) == summary.flows > 0
    assert sorted(e["id"] for e in starts) == sorted(e["id"] for e in ends)
    processes = _processes(doc)
    assert all(processes[e["pid"]].startswith("rank 0 · process") for e in starts)  # from host threads
    assert all(processes[e["pid"]].startswith("rank 0 · GPU 0") for e in ends)  # to the GPU's streams
    by_id = {e["id"]: e for e in starts}
    assert all(e["ts"] >= by_id[e["id"]]["ts"] for e in ends)  # the work starts after its launch


def test_merge_busy_by_hand():
    from tracelab.render.export.perfetto_tracks import merge_busy

    key = np.array([3, 1, 1, 1, 3])
    start = np.array([0, 0, 5, 20, 2])
    end = np.array([4, 10, 8, 30, 3])
    k, s, e, n = merge_busy(key, start, end)
    # key 1: [0,10] with [5,8] inside -> [0,10] (2 kernels), then [20,30]; key 3: [0,4] with [2,3] inside
    assert k.tolist() == [1, 1, 3] and s.tolist() == [0, 20, 0] and e.tolist() == [10, 30, 4]
    assert n.tolist() == [2, 1, 2]


def test_large_sm_lanes_are_merged_into_busy_stretches(exported, tmp_path):
    from tracelab.analyses.sm.summary import expand_lanes, sm_lanes

    tl, an, _, _ = exported["pdl-pdl-nsys"]
    summary = write_perfetto(tmp_path / "m.json", tl, an, max_sm_rows=10_000)
    doc = orjson.loads((tmp_path / "m.json").read_bytes())
    assert any("merged into" in n for n in summary.notes) and doc["tracelabNotes"] == summary.notes
    per_sm = expand_lanes(sm_lanes(tl, 0, 0)[0])
    expected = 0
    for _, g in per_sm.groupby(["sm", "measured"]):  # the union of each SM's intervals, by hand
        end = None
        for s, e in sorted(zip(g["start"].tolist(), g["end"].tolist())):
            if end is None or s > end:
                expected += 1
                end = e
            else:
                end = max(end, e)
    got = [e for e in doc["traceEvents"] if e.get("cat", "").startswith("sm.")]
    assert len(got) == expected < len(per_sm)
    assert all(e["name"] == "busy" or e["name"].startswith("busy (") for e in got)
