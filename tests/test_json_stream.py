"""`analyze --json` streams the gaps: the bytes must be those of one orjson.dumps of the whole document."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tracelab.api import analyze, load
from tracelab.render.document import to_document, write_document

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
    analysis = analyze(load(TRACE))
    assert proc.stdout == orjson.dumps(to_document(analysis), option=OPTIONS)


def test_no_gaps_document() -> None:
    analysis = analyze(load(TRACE))
    from dataclasses import replace

    empty = replace(analysis, gaps=())
    out = io.BytesIO()
    write_document(empty, out.write)
    assert out.getvalue() == orjson.dumps(to_document(empty), option=OPTIONS)
