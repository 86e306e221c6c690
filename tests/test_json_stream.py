"""`analyze --json` streams the gaps: the bytes must be those of one orjson.dumps of the whole document."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelab.api import analyze, load
from tracelab.render.export.document import to_document, write_document

DATA = Path(__file__).parent / "data"
TRACE = DATA / "torch_mixed_small" / "trace.json.gz"
OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


@pytest.mark.parametrize("chunk", [1, 2, 7, 4096])
def test_streamed_document_is_the_whole_dump(chunk: int) -> None:
    analysis = analyze(load(TRACE))
    assert len(analysis.gaps) > 10
    extra = {"ranks": [{"rank": 0, "note": '"gaps": [],\n'}]}
    whole = orjson.dumps({**to_document(analysis), **extra}, option=OPTIONS)
    out = io.BytesIO()
    write_document(analysis, out.write, extra, chunk=chunk)
    assert out.getvalue() == whole
    assert orjson.loads(out.getvalue())["gaps"] == orjson.loads(whole)["gaps"]


def test_cli_json_is_the_whole_dump() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tracelab.cli", "analyze", "--json", str(TRACE)], capture_output=True, check=True
    )
    timeline = load(TRACE)
    tl = timeline
    analysis = analyze(timeline)
    from tracelab.analyses.ranks.critical_path import critical_path_document, critical_path_for
    from tracelab.api import (
        document_extras,
        health,  # issue 27: `analyze --json` ends with the trace health section
    )

    extra = document_extras(timeline, analysis)
    # issue 24: the critical path of the steps comes first, then issue 27's sections
    assert list(extra) == ["critical_path", "health", "ranges", "memory"]
    assert extra["health"] == health(timeline, analysis).to_dict()
    assert extra["critical_path"] == critical_path_document(critical_path_for(tl, analysis))
    assert proc.stdout == orjson.dumps({**to_document(analysis), **extra}, option=OPTIONS)


def test_no_gaps_document() -> None:
    analysis = analyze(load(TRACE))
    from msgspec.structs import replace

    empty = replace(analysis, gaps=())
    out = io.BytesIO()
    write_document(empty, out.write)
    assert out.getvalue() == orjson.dumps(to_document(empty), option=OPTIONS)


def test_gap_items_are_orjson_bytes_for_odd_values() -> None:
    """The per-gap template (render.document.gap_items) against orjson's own encoding of the gap dicts,
    on the fixture's gaps with odd values put in: float texts orjson writes its own way (exponents,
    -0.0, NaN, infinities), launches missing, and evidence needing escapes or outside ASCII."""

    from tracelab.analyses.results import GapTable
    from tracelab.render.export.document import _ITEMS_FROM, _ITEMS_TO, gap_docs, gap_items
    from tracelab.render.text.gap_evidence import gap_evidence

    analysis = analyze(load(TRACE))
    gaps = analysis.gaps
    assert isinstance(gaps, GapTable)
    n = len(gaps)
    cols = {c: gaps.column(c).copy() for c in GapTable.COLUMNS}
    odd = [-0.0, 0.0, 1e-05, 1e-7, 1e16, 1e22, 123456789.125, float("nan"), float("inf"), -float("inf"), 0.1, 1 / 3]
    cols["host_active"][: len(odd)] = odd
    cols["launch_start"][::3] = -1
    cols["rank"][1] = -5
    texts = gap_evidence(analysis)
    texts[:6] = ['quote " and \\ back', "ctl \x00\x01\x1f\t\n\r\x08\x0c", "µs é 漢字 \u2028\u2029 😀", "", "/", "\x7f"]
    table = GapTable(
        cols["rank"], cols["device"], cols["start"], cols["end"], cols["cause"], cols["host_data"],
        gaps.host_data_labels, cols["launch_start"], cols["launch_tid"], cols["host_active"], cols["detail"],
    )
    want = orjson.dumps({"gaps": gap_docs(table, texts)}, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    assert gap_items(table, texts) == want[_ITEMS_FROM:-_ITEMS_TO]
    assert n > len(odd)
    part = table.rows(2, 9)
    want = orjson.dumps({"gaps": gap_docs(part, texts[2:9])}, option=orjson.OPT_INDENT_2)
    assert gap_items(part, texts[2:9]) == want[_ITEMS_FROM:-_ITEMS_TO]
    assert gap_items(table.rows(0, 0), []) == b""
    # a text that ends in '",' (or is '","') puts '","' inside an item of orjson's text of the list
    for odd_text in ('ends in ",', '","', '\\",'):
        cut = [*texts[:7], odd_text, *texts[8:]]
        want = orjson.dumps({"gaps": gap_docs(table, cut)}, option=orjson.OPT_INDENT_2)
        assert gap_items(table, cut) == want[_ITEMS_FROM:-_ITEMS_TO]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.text(alphabet='",\\a\x01é ', max_size=6), min_size=1, max_size=6))
def test_evidence_texts_encoded_at_once_are_each_ones_own(texts: list[str]) -> None:
    """One orjson.dumps of all the texts, cut at '","', against orjson's text of each (quotes, commas and
    backslashes in every place: ends in '",', is '","', ends in a backslash)."""
    from tracelab.render.export.document import _encoded_strings

    assert _encoded_strings(texts) == [orjson.dumps(t)[1:-1] for t in texts]
