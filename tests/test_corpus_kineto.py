"""Every Kineto trace in ../shared/corpus imports or is rejected with one line; counts match the
corpus README table (events, kernels, memcpy/memset, streams, NCCL GPU events, orphans, hardware)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tracelab.errors import BadInput
from tracelab.io import load_trace
from tracelab.model import EventKind, Flag

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not CORPUS.exists(), reason="corpus not present")]

# files that are not usable Kineto GPU traces, and the words their one-line rejection must contain
REJECTED = {
    "hta/execution_trace__benchmark_simple_add_et.json.gz": "execution trace",
}
# a kernel without args.device / args.stream: loaded on its pid/tid lane with a note (issue 11), where the
# corpus README (written for the refusing parser) counts no stream and no orphan
PID_TID_LANE = {"hta/large_integer_trace__rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz": "ncclKernel_AllReduce"}
NOT_TRACES = ("execution_details.json",)  # sidecars, not traces (the corpus README says so)


def _readme_rows() -> dict[str, dict[str, str]]:
    """Section 1 of the corpus README: one row per Kineto file."""
    rows: dict[str, dict[str, str]] = {}
    if not CORPUS.exists():
        return rows
    text = (CORPUS / "README.md").read_text()
    section = text.split("## 1.", 1)[1].split("## 2.", 1)[0]
    header: list[str] = []
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "path":
            header = cells
            continue
        rows[cells[0].strip("`")] = dict(zip(header, cells))
    return rows


README = _readme_rows()


def _kineto_files() -> list[str]:
    if not CORPUS.exists():
        return []
    files = [
        p
        for p in CORPUS.rglob("*")
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
    ]
    return sorted(str(p.relative_to(CORPUS)) for p in files if not p.name.endswith(NOT_TRACES))


@pytest.fixture(scope="module")
def parsed():
    """Parse each file once per module (several tests look at the same file)."""
    cache: dict[str, object] = {}

    def get(rel: str):
        if rel not in cache:
            try:
                cache[rel] = load_trace(CORPUS / rel)
            except BadInput as exc:
                cache[rel] = exc
        return cache[rel]

    return get


FILES = _kineto_files()


def test_readme_lists_every_kineto_file():
    assert FILES, "no Kineto files found"
    missing = [f for f in FILES if f not in README]
    assert not missing


@pytest.mark.parametrize("rel", FILES)
def test_imports_or_rejects_in_one_line(rel, parsed):
    result = parsed(rel)
    if rel in REJECTED:
        assert isinstance(result, BadInput)
        msg = str(result)
        assert "\n" not in msg and str(CORPUS / rel) in msg and REJECTED[rel] in msg
        return
    assert not isinstance(result, Exception), str(result)
    result.validate()
    if rel in PID_TID_LANE:
        ev = result.events
        k = ev[ev["kind"] == int(EventKind.KERNEL)]
        assert len(k) == 1 and result.name(int(k["name"].iloc[0])) == PID_TID_LANE[rel]
        assert any("no args.device / args.stream" in n and PID_TID_LANE[rel] in n for n in result.meta.notes)
        assert any("no matching launch" in n for n in result.meta.notes)
        return
    row = README[rel]
    ev = result.events
    kind = ev["kind"].to_numpy()
    gpu = np.isin(kind, [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)])
    assert result.meta.stats["trace_events"] == int(row["events"])
    assert int((kind == EventKind.KERNEL).sum()) == int(row["kernels"])
    memcpy, memset = (int(x) for x in row["memcpy/memset"].split("/"))
    assert int((kind == EventKind.MEMCPY).sum()) == memcpy
    assert int((kind == EventKind.MEMSET).sum()) == memset
    streams = ev.loc[gpu, ["device", "stream"]].drop_duplicates()
    assert len(streams) == int(row["streams"])
    m = re.search(r"(\d+) orphan GPU", row["oddities"])
    assert result.meta.stats["orphan_gpu_events"] == (int(m.group(1)) if m else 0)
    assert int(((ev["flags"].to_numpy() & Flag.ORPHAN) != 0).sum()) == result.meta.stats["orphan_gpu_events"]
    nccl = np.isin(ev["name"].to_numpy(), [i for i, s in enumerate(result.strings) if "nccl" in s.lower()])
    assert int((gpu & nccl).sum()) == int(row["NCCL GPU ev"])
    hw = row["hardware"]
    if hw not in ("-", "(empty name)"):
        assert result.meta.gpu == hw
    if not gpu.any():
        assert any("no GPU activity" in n for n in result.meta.notes)
    rank = re.search(r"rank (\d+)/", row["oddities"])
    if rank:
        assert result.meta.ranks == (int(rank.group(1)),)


def test_comm_flag_on_nccl_kernels(parsed):
    tl = parsed("hta/df_index_resolver__df_index_resolver.json.gz")
    ev = tl.events
    comm = (ev["flags"].to_numpy() & Flag.COMM) != 0
    assert int(comm.sum()) == 2020  # the README's NCCL GPU events of this trace
    assert all("nccl" in s.lower() for s in tl.names(ev["name"][comm]))


def test_legacy_schema_sample(parsed):
    tl = parsed("kineto_tb_plugin/samples__resnet50_autograd_api_num_workers_0__worker0.pt.trace.json.gz")
    assert tl.meta.extra["kineto_schema"] == "2021"
    kern = tl.events[tl.events["kind"] == EventKind.KERNEL]
    assert (kern["grid_x"] > 0).all() and (kern["block_x"] > 0).all() and (kern["registers"] >= 0).all()


def test_device_properties_from_compute_properties(parsed):
    tl = parsed("kineto_tb_plugin/test__gpu_metrics_input.json")
    d = tl.devices[0]
    assert (d.name, d.sm_count, d.cc_major, d.max_threads_per_sm) == ("Tesla V100-DGXS-32GB", 80, 7, 2048)


def test_eight_rank_directory(parsed):
    tl = load_trace(CORPUS / "param" / "dlrm_kineto_8rank")
    tl.validate()
    assert tl.meta.ranks == tuple(range(8))
    files = sorted((CORPUS / "param" / "dlrm_kineto_8rank").iterdir())
    singles = [parsed(str(f.relative_to(CORPUS))) for f in files]
    assert len(tl.events) == sum(len(s.events) for s in singles)
    assert tl.meta.stats["orphan_gpu_events"] == 128  # ranks 1 and 3 have 64 each
    per_rank = tl.events[tl.events["kind"] == EventKind.KERNEL].groupby("rank").size()
    assert per_rank.to_dict() == {
        s.meta.ranks[0]: int((s.events["kind"] == EventKind.KERNEL).sum()) for s in singles
    }
    streams = tl.events[tl.gpu_mask()].groupby("rank")["stream"].unique()
    assert all(sorted(s) == [7, 22, 24, 84] for s in streams)


def test_amd_trace_devices(parsed):
    tl = parsed("tracelens/mi300__resnet_act_checkpoint.json.gz")
    assert tl.meta.gpu == "AMD Instinct MI300X"
    api = tl.events[tl.events["kind"] == EventKind.RUNTIME]
    assert any(s.startswith("hip") for s in tl.names(api["name"]))
    assert tl.meta.stats["orphan_gpu_events"] == 968


@pytest.mark.parametrize(
    "rel,words",
    [
        ("hta/mtia_inference_trace__mtia_inference_rank_0.json.gz", "MTIA accelerator trace"),
        ("hta/cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "no kernel/memcpy/memset"),
        ("zoology/trace.json", "no kernel/memcpy/memset"),
    ],
)
def test_traces_without_gpu_work_keep_host_events(rel, words, parsed):
    tl = parsed(rel)
    assert len(tl.events) > 0 and not tl.gpu_mask().any() and tl.devices == ()
    assert any(words in n for n in tl.meta.notes)
    host = tl.events[tl.events["pid"] >= 0]
    assert len(host) == len(tl.events)
