"""The Timeline's numpy columns: lanes numbered as a sorted pandas groupby numbers them, constant columns
as read-only broadcast views, DataFrame views without copies, and nothing heavy imported for a parse."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tl_hygiene import CORPUS

from tracelab.model import EVENT_COLUMNS, LANE_COLUMNS, EventKind, RunMeta, build_timeline
from tracelab.model import timeline as tm
from tracelab.model.grouping import dense_codes, group_codes

DATA = Path(__file__).parent / "data"


def _random_columns(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 10**9, n))
    return {
        "kind": rng.choice([int(k) for k in EventKind], n).astype(np.int8),
        "start": start,
        "end": start + rng.integers(0, 1000, n),
        "rank": rng.integers(0, 3, n).astype(np.int32),
        "device": rng.integers(-1, 4, n).astype(np.int32),
        "context": rng.choice([-1, 1, 2**40], n),
        "stream": rng.choice([-1, 7, 13, 2**33], n),
        "pid": rng.choice([-1, 5, 2**50], n),
        "tid": rng.integers(-1, 3 * n, n),  # wide range: the sort path of dense_codes
        "category": rng.integers(-1, 4, n).astype(np.int32),
    }


@pytest.mark.parametrize(("n", "seed"), [(1, 0), (50, 1), (5000, 2), (70000, 3)])
def test_lanes_numbered_as_sorted_groupby(n: int, seed: int) -> None:
    cols = _random_columns(n, seed)
    tl = build_timeline(cols, [], RunMeta(source="x", format="kineto"), validate=False)
    lane_kind = tm._lane_kind(tl.cols)  # the lane key columns of every event (LANE_COLUMNS but `lane`)
    keys = pd.DataFrame({k: tm._lane_key(tl.cols, lane_kind, k) for k in tm._LANE_KEYS})
    expected = keys.groupby(list(keys.columns), sort=True).ngroup().to_numpy()
    np.testing.assert_array_equal(tl.col("lane"), expected)
    first = np.unique(expected, return_index=True)[1]
    for c in LANE_COLUMNS:
        if c != "lane":
            np.testing.assert_array_equal(tl.lane_col(c), keys[c].to_numpy()[first], err_msg=c)
            assert tl.lane_col(c).dtype == np.dtype(LANE_COLUMNS[c])


def test_dense_codes_keep_order() -> None:
    rng = np.random.default_rng(4)
    for values in (rng.integers(-5, 5, 1000), rng.integers(-(2**62), 2**62, 1000), np.array([3, 3, 3])):
        codes, k = dense_codes(values)
        uniq = np.unique(values)
        assert k == len(uniq)
        np.testing.assert_array_equal(codes, np.searchsorted(uniq, values))
    ids, k = group_codes(iter([np.array([2, 1, 2, 1]), np.array([9, 9, 8, 9])]))
    assert k == 3 and ids.tolist() == [2, 0, 1, 0]  # (1,9) < (2,8) < (2,9)


def test_constant_columns_are_broadcast_and_read_only() -> None:
    cols = _random_columns(1000, 5)
    cols["rank"] = np.int32(4)
    tl = build_timeline(cols, [], RunMeta(source="x", format="kineto"), validate=False)
    for c in ("rank", "graph_id", "graph_node", "green_context"):
        a = tl.col(c)
        assert a.strides == (0,) and not a.flags.writeable and len(a) == 1000
        assert str(a.dtype) == EVENT_COLUMNS[c]
    assert (tl.col("rank") == 4).all() and (tl.col("graph_id") == -1).all()
    # the DataFrame view shares the arrays; a derived timeline made from a DataFrame works as before
    assert np.shares_memory(tl.events["start"].to_numpy(), tl.col("start"))
    half = replace(tl, events=tl.events.iloc[:500].reset_index(drop=True))
    assert half.n_events == 500 and half.lane_cols is tl.lane_cols


def test_parse_imports_no_heavy_modules() -> None:
    code = (
        "import sys; from tracelab.api import load; import tracelab.cli; "
        f"load({str(DATA / 'torch_mixed_small' / 'trace.json.gz')!r}); "
        "print(' '.join(m for m in ('pandas', 'plotly', 'dask', 'sqlite_utils', 'rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


@pytest.mark.parametrize(
    "trace",
    [
        DATA / "torch_mixed_small" / "trace.json.gz",  # recorded on an H200: kernels with launch shapes, SM count
        pytest.param(CORPUS / "hta" / "df_index_resolver__df_index_resolver.json.gz", marks=pytest.mark.corpus),
    ],
    ids=["recorded", "corpus-54MB"],
)
def test_analyze_of_a_kineto_trace_never_imports_pandas(trace: Path) -> None:
    """`analyze --json` and the text output of a Kineto trace run on numpy columns only: the SM-time
    estimate, the step table, the gap evidence and the distinct-value helpers need no pandas (importing
    it took a third of `analyze` on the 54 MB corpus trace). The outputs are not empty."""
    if not trace.is_file():
        pytest.skip(f"{trace} is not here")
    code = (
        "import sys, atexit\n"
        "atexit.register(lambda: print('pandas loaded:', 'pandas' in sys.modules, file=sys.stderr, end=''))\n"
        "from tracelab.cli import main; main()"
    )
    for args in (["analyze", "--json", str(trace)], ["analyze", str(trace)]):
        run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
        assert len(run.stdout) > 1000 and run.stderr.endswith("pandas loaded: False"), (args, run.stderr[-300:])
