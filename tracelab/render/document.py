"""The `analyze --json` document (schema 2, docs/DESIGN.md): the analysis' numbers
(tracelab.analyses.results.document) with each gap's evidence in words (tracelab.render.gap_evidence).

    to_document(analysis)                    the whole document as a dict
    write_document(analysis, write, extra)   the same as indented JSON bytes, the gaps streamed in chunks
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..analyses.results import Analysis, GapTable, document, gap_docs
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
        # encoded one level down, as the value of a key: '{\n  "gaps": [\n    {...},\n    {...}\n  ]\n}' holds
        # the items already indented as the document has them (no pass to re-indent every line)
        body = memoryview(orjson.dumps({"gaps": gap_docs(part, texts)}, option=options))
        if i:
            write(b",")
        write(body[_ITEMS_FROM:-_ITEMS_TO])
    write(b"\n  ],\n" + head[cut + len(_GAPS_EMPTY) :] + b"\n")
