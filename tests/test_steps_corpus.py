"""Step inference checked against real traces recorded by others (skipped when the corpus is absent):
on traces that carry ProfilerStep markers, inference run as if they did not finds the same number of
steps, of about the same length; on marker-free ones, the number of iterations the corpus catalog
gives (/work/shared/corpus/README.md)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tracelab.analyses.steps.infer import infer_steps, marked_steps

CORPUS = Path(
    os.environ.get("TRACELAB_CORPUS", Path(__file__).resolve().parents[1].parent / "shared" / "corpus")
)
pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not CORPUS.exists(), reason="corpus not present")]

MARKED = [
    "kineto_tb_plugin/samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",  # 6 steps
    "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # 5 steps, DDP
    "hta/trace_diff__control__control.json.gz",  # 6 steps, DLRM rank 3 of 8
    "hta/df_index_resolver__df_index_resolver.json.gz",  # 5 steps, DDP rank 1 on V100, 123k events
    "hta/negative_queue_length_values_check__rank0.json.gz",  # 5 steps, DLRM/TorchRec, orphans
]
# catalog: "Linear-model training, 40 iterations", "ResNet training ..., 30 iterations"
UNMARKED = {
    "param/et_replay__tests__inputs__linear_kineto.json.gz": 40,
    "param/et_replay__tests__inputs__resnet_kineto.json.gz": 30,
}


def _load(rel: str):
    from tracelab.io import load_trace

    path = CORPUS / rel
    if not path.exists():
        pytest.skip(f"{rel} not in the corpus")
    return load_trace(path)


@pytest.mark.parametrize("rel", MARKED)
def test_inference_agrees_with_the_markers(rel: str) -> None:
    tl = _load(rel)
    rank = int(np.unique(tl.events["rank"].to_numpy())[0])
    ms, me = marked_steps(tl, rank)
    s, e, note = infer_steps(tl, rank)
    assert ms.size >= 3 and s.size == ms.size, note
    # every inferred step but the last (which ends with its last launch) lasts within 10% of the
    # marked one; the steps are cut at a different point of the iteration, the period is the same
    rel_err = np.abs((e - s)[:-1] - (me - ms)[:-1]) / (me - ms)[:-1]
    assert rel_err.max() < 0.10, rel_err


@pytest.mark.parametrize(("rel", "iterations"), UNMARKED.items())
def test_inference_counts_the_catalogued_iterations(rel: str, iterations: int) -> None:
    tl = _load(rel)
    s, _, note = infer_steps(tl, int(np.unique(tl.events["rank"].to_numpy())[0]))
    assert abs(s.size - iterations) <= 2, note
