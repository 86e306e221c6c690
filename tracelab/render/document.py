"""The `analyze --json` document (schema 2, docs/DESIGN.md): the analysis' numbers
(tracelab.analyses.results.document) with each gap's evidence in words (tracelab.render.gap_evidence).

    to_document(analysis)                    the whole document as a dict
    write_document(analysis, write, extra)   the same as indented JSON bytes, the gaps streamed in chunks
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..analyses.results import CAUSES, Analysis, GapTable, document, gap_docs
from .gap_evidence import gap_evidence

__all__ = ["to_document", "write_document"]


def to_document(analysis: Analysis) -> dict[str, Any]:
    """The `analyze --json` document of `analysis` (every gap's evidence text included)."""
    return document(analysis, gap_evidence(analysis))


_GAPS_EMPTY = b'\n  "gaps": [],\n'
_ITEMS_FROM = len(b'{\n  "gaps": [')  # '{\n  "gaps": [' + '\n    {...},\n    {...}' + '\n  ]\n}'
_ITEMS_TO = len(b"\n  ]\n}")


def write_document(
    analysis: Analysis, write: Callable[[bytes], Any], extra: dict[str, Any] | None = None, chunk: int = 32768
) -> None:
    """Write `{**to_document(analysis), **extra}` as indented JSON (orjson, 2 spaces, a final newline)
    through `write`, byte for byte what one `orjson.dumps` of the whole document gives, but with the
    gaps (and their evidence text) built and encoded `chunk` at a time: no dict or sentence per gap for
    the whole list at once, no copy of the whole text in memory."""
    import orjson

    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    head = orjson.dumps({**document(analysis, None), **(extra or {})}, option=options)
    gaps = analysis.gaps
    if not gaps:
        write(head + b"\n")
        return
    cut = head.index(_GAPS_EMPTY)  # the key is top-level: its line is unique (strings hold no newline)
    write(head[:cut] + b'\n  "gaps": [')
    for i in range(0, len(gaps), chunk):
        part = gaps.rows(i, i + chunk) if isinstance(gaps, GapTable) else gaps[i : i + chunk]
        texts = gap_evidence(analysis, part)
        if i:
            write(b",")
        if isinstance(part, GapTable):
            write(gap_items(part, texts))
            continue
        # encoded one level down, as the value of a key: '{\n  "gaps": [\n    {...},\n    {...}\n  ]\n}' holds
        # the items already indented as the document has them (no pass to re-indent every line)
        body = memoryview(orjson.dumps({"gaps": gap_docs(part, texts)}, option=options))
        write(body[_ITEMS_FROM:-_ITEMS_TO])
    write(b"\n  ],\n" + head[cut + len(_GAPS_EMPTY) :] + b"\n")


# One gap as orjson (OPT_INDENT_2) writes it as an item of the top-level "gaps" list (integers as %d
# writes them, which is orjson's text too); the launch fields are null when the launch is not in the
# trace. Keys and their order are those of results.gap_doc.
def _item(launch: bytes) -> bytes:
    return (
        b'\n    {\n      "rank": %d,\n      "device": %d,\n      "start_ns": %d,\n      "end_ns": %d,\n'
        b'      "duration_ns": %d,\n      "cause": %s,\n      "evidence": %s,\n      "host_data": %s,\n'
        b'      "details": {\n        "launch_start_ns": ' + launch + b',\n        "launch_tid": ' + launch
        + b',\n        "host_active_fraction": %s\n      }\n    }'
    )


_ITEM_LAUNCHED = _item(b"%d")
_ITEM_NO_LAUNCH = _item(b"null")


def _encoded_floats(values: np.ndarray) -> list[bytes]:
    """orjson's text of each float (shortest round trip, its own exponent style, NaN as null), encoded
    once per distinct value; keyed by the bits, so -0.0 and 0.0 (equal to np.unique) keep their own."""
    import orjson

    values = np.ascontiguousarray(values, dtype=np.float64)
    if not len(values):
        return []
    _, first, inverse = np.unique(values.view(np.int64), return_index=True, return_inverse=True)
    table = orjson.dumps(values[first].tolist())[1:-1].split(b",")
    return np.array(table, dtype=object)[inverse.reshape(-1)].tolist()


def gap_items(gaps: GapTable, evidence: Sequence[str]) -> bytes:
    """The gaps' items of the `--json` document's "gaps" list, with their evidence texts, byte for byte
    what orjson writes for `gap_docs(gaps, evidence)` one level down (each item starts with its newline
    and indent, items joined by ','), made from the columns with one format per gap instead of a dict
    per gap that orjson then walks (tests/test_json_stream.py compares the two)."""
    import orjson

    if not len(gaps):
        return b""
    cause = [orjson.dumps(c) for c in CAUSES]
    labels = [orjson.dumps(h) for h in gaps.host_data_labels]
    col = gaps.column
    dumps, launched, no_launch = orjson.dumps, _ITEM_LAUNCHED, _ITEM_NO_LAUNCH
    return b",".join([
        launched % (r, d, s, e, e - s, cause[k], dumps(t), labels[h], ls, lt, a) if ls >= 0
        else no_launch % (r, d, s, e, e - s, cause[k], dumps(t), labels[h], a)
        for r, d, s, e, k, t, h, ls, lt, a in zip(
            col("rank").tolist(), col("device").tolist(), col("start").tolist(), col("end").tolist(),
            col("cause").tolist(), evidence, col("host_data").tolist(), col("launch_start").tolist(),
            col("launch_tid").tolist(), _encoded_floats(col("host_active")), strict=True,
        )
    ])
