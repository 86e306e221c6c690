"""TraceLens acceptance: for the H100 traces in the corpus whose TraceLens reports sit beside them,
busy and total GPU time from `analyze` match TraceLens's gpu_timeline.csv within 1 µs when GPU
events with no matching launch are excluded, as TraceLens does (AnalysisOptions(exclude_orphans=True)).

The CSV has columns type, "time ms", percent; busy_time is the union of GPU activity and total_time
is first start to last end of that activity (our busy_ns and span_ns)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tracelab.analyses import AnalysisOptions, analyze
from tracelab.io import load_trace
from tracelab.model import Flag

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not CORPUS.exists(), reason="corpus not present")]

SUFFIX = "_perf_report_csvs__gpu_timeline.csv"


def _pairs() -> list[tuple[str, str]]:
    if not CORPUS.exists():
        return []
    out = []
    for csv in sorted((CORPUS / "tracelens").glob("h100__*" + SUFFIX)):
        trace = csv.with_name(csv.name[: -len(SUFFIX)] + ".json.gz")
        if trace.exists():  # some reports come without their trace
            out.append((trace.name, csv.name))
    return out


PAIRS = _pairs()


def test_there_are_reference_pairs():
    assert len(PAIRS) >= 5


@pytest.mark.parametrize("trace,csv", PAIRS)
def test_busy_and_total_match_tracelens(trace, csv):
    ref = pd.read_csv(CORPUS / "tracelens" / csv).set_index("type")["time ms"]
    tl = load_trace(CORPUS / "tracelens" / trace)
    result = analyze(tl, AnalysisOptions(exclude_orphans=True))
    assert len(result.devices) == 1
    dev = result.devices[0]
    busy_us, total_us = dev.busy_ns / 1e3, dev.span_ns / 1e3
    assert abs(busy_us - ref["busy_time"] * 1e3) < 1.0
    assert abs(total_us - ref["total_time"] * 1e3) < 1.0
    assert abs(dev.idle_ns / 1e3 - ref["idle_time"] * 1e3) < 1.0


def test_orphans_matter_for_qwen():
    """The Qwen trace has 509 GPU events launched before the capture window: keeping them changes
    the total, which is why the option exists."""
    name = "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    ref = pd.read_csv(CORPUS / "tracelens" / name.replace(".json.gz", SUFFIX)).set_index("type")["time ms"]
    tl = load_trace(CORPUS / "tracelens" / name)
    assert int(((tl.events["flags"].to_numpy() & Flag.ORPHAN) != 0).sum()) == 509
    kept = analyze(tl).devices[0]
    assert abs(kept.span_ns / 1e3 - ref["total_time"] * 1e3) > 1.0
