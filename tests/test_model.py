import numpy as np
import pytest

from tracelab.model import EventKind, LaneKind, ModelError, RunMeta, StringInterner, build_timeline
from tracelab.model.api_names import classify_api_name
from tracelab.model.kinds import Flag, SyncKind


def _tiny():
    s = StringInterner()
    names = s.intern_array(["k1", "cudaLaunchKernel", "k1", "cudaStreamSynchronize"])
    return build_timeline(
        {
            "kind": [EventKind.KERNEL, EventKind.RUNTIME, EventKind.KERNEL, EventKind.RUNTIME],
            "start": [100, 10, 50, 60],
            "end": [150, 20, 90, 160],
            "device": [0, -1, 0, -1],
            "stream": [7, -1, 8, -1],
            "pid": [-1, 1, -1, 1],
            "tid": [-1, 2, -1, 2],
            "name": names,
            "correlation": [5, 5, 6, -1],
        },
        s.strings,
        RunMeta(source="x", format="kineto"),
    )


def test_build_sorts_and_assigns_lanes():
    tl = _tiny()
    assert tl.events["start"].tolist() == [10, 50, 60, 100]
    # two GPU stream lanes and one host thread lane
    kinds = sorted(tl.lanes["lane_kind"].tolist())
    assert kinds == [LaneKind.GPU_STREAM, LaneKind.GPU_STREAM, LaneKind.HOST_THREAD]
    assert [(d.rank, d.device) for d in tl.devices] == [(0, 0)]
    assert list(tl.names(tl.events["name"])) == ["cudaLaunchKernel", "k1", "cudaStreamSynchronize", "k1"]


def test_validate_rejects_reversed_interval():
    tl = _tiny()
    tl.events.loc[0, "end"] = 0
    with pytest.raises(ModelError, match="end before they start"):
        tl.validate()


def test_classify_api_names():
    assert classify_api_name("cudaStreamSynchronize") == (SyncKind.STREAM, Flag.BLOCKING)
    assert classify_api_name("cudaMemcpyAsync")[1] == Flag.LAUNCH
    assert classify_api_name("cudaMemcpy")[0] == SyncKind.MEMCPY
    assert classify_api_name("cuLaunchKernel") == (SyncKind.NONE, Flag.LAUNCH)
    assert classify_api_name("cudaStreamWaitEvent")[0] == SyncKind.STREAM_WAIT_EVENT
    assert classify_api_name("cudaGetDevice") == (SyncKind.NONE, 0)


def test_empty_timeline_is_valid():
    tl = build_timeline({}, [], RunMeta(source="x", format="kineto"))
    assert len(tl.events) == 0 and len(tl.lanes) == 0
    assert np.array_equal(tl.gpu_mask(), np.zeros(0, dtype=bool))


def test_merge_remaps_probe_blocks_to_their_kernels():
    import pandas as pd

    from tracelab.model import merge_timelines

    def part(rank, starts):
        s = StringInterner()
        names = s.intern_array([f"k{rank}_{i}" for i in range(len(starts))])
        tl = build_timeline(
            {"kind": [EventKind.KERNEL] * len(starts), "start": starts, "end": [t + 5 for t in starts],
             "device": 0, "stream": 7, "rank": rank, "name": names},
            s.strings, RunMeta(source="x", format="kineto", ranks=(rank,)),
        )
        blocks = pd.DataFrame({"rank": rank, "device": 0, "green_context": -1, "sm": [3, 4],
                               "start": [starts[1], starts[0]], "end": [starts[1] + 5, starts[0] + 5],
                               "name": [names[1], names[0]], "kernel": [1, 0]})
        return build_timeline({c: tl.events[c].to_numpy() for c in tl.events.columns if c != "lane"},
                              tl.strings, tl.meta, sm_blocks=blocks)

    merged = merge_timelines([part(0, [10, 30]), part(1, [5, 20])], RunMeta(source="x", format="kineto", ranks=(0, 1)))
    blocks = merged.sm_blocks
    ev = merged.events
    for b in blocks.itertuples():
        row = ev.iloc[b.kernel]
        assert row["start"] == b.start and row["rank"] == b.rank
        assert merged.strings[row["name"]] == merged.strings[b.name]


def test_devices_seen_in_events_small_and_large_ids():
    """build_timeline lists every (rank, device) that events use, in order, whether the ids are small
    (counted) or large (sorted)."""
    rng = np.random.default_rng(5)
    for hi_rank, hi_dev in ((3, 7), (1, 5000), (2**31 - 1, 3), (5, 2**31 - 1)):
        n = 500
        rank = rng.integers(0, hi_rank + 1, n)
        rank[0] = hi_rank
        dev = rng.integers(-1, hi_dev + 1, n)
        dev[1] = hi_dev
        kind = np.where(dev >= 0, int(EventKind.KERNEL), int(EventKind.RUNTIME)).astype(np.int8)
        cols = {"kind": kind, "start": np.arange(n), "end": np.arange(n) + 1, "rank": rank, "device": dev}
        tl = build_timeline(cols, [], RunMeta(source="x", format="kineto"))
        want = sorted({(int(r), int(d)) for r, d in zip(rank, dev) if d >= 0})
        assert [(d.rank, d.device) for d in tl.devices] == want
