"""The `analyze --json` document (schema 2, docs/DESIGN.md): the analysis' numbers
(`document`) with each gap's evidence in words (tracelab.render.text.gap_evidence).

    to_document(analysis)                    the whole document as a dict
    write_document(analysis, write, extra)   the same as indented JSON bytes, the gaps streamed in chunks
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from tracelab.analyses.results import (
    CAUSES,
    SCHEMA_VERSION,
    Analysis,
    DeviceSummary,
    Gap,
    GapTable,
    StepInfo,
    bulk_allocation,
)
from tracelab.analyses.steps.setup_phase import setup_document
from tracelab.analyses.steps.table import StepRow
from tracelab.render.text.gap_evidence import gap_evidence

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
        b'      "duration_ns": %d,\n      "cause": %s,\n      "evidence": "%s",\n      "host_data": %s,\n'
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


def _encoded_strings(texts: Sequence[str]) -> list[bytes]:
    """orjson's text of each string, without its quotes, from one `dumps` of them all, cut at '","': exact
    when no '\\"' is in it (no string holds a '"', none ends in a backslash), as every '"' is then one that
    opens or closes a string. Otherwise each string is encoded on its own."""
    import orjson

    texts = texts if isinstance(texts, list) else list(texts)
    encoded = orjson.dumps(texts)
    if b'\\"' in encoded:
        return [orjson.dumps(t)[1:-1] for t in texts]
    return encoded[2:-2].split(b'","')


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
    launched, no_launch = _ITEM_LAUNCHED, _ITEM_NO_LAUNCH
    return b",".join([
        launched % (r, d, s, e, e - s, cause[k], t, labels[h], ls, lt, a) if ls >= 0
        else no_launch % (r, d, s, e, e - s, cause[k], t, labels[h], a)
        for r, d, s, e, k, t, h, ls, lt, a in zip(
            col("rank").tolist(), col("device").tolist(), col("start").tolist(), col("end").tolist(),
            col("cause").tolist(), _encoded_strings(evidence), col("host_data").tolist(),
            col("launch_start").tolist(), col("launch_tid").tolist(), _encoded_floats(col("host_active")), strict=True,
        )
    ])


def gap_doc(g: Gap, evidence: str) -> dict[str, Any]:
    """One gap as the document lists it, with its evidence text (tracelab.render.text.gap_evidence)."""
    launched = g.launch_start_ns >= 0
    return {"rank": g.rank, "device": g.device, "start_ns": g.start_ns, "end_ns": g.end_ns, "duration_ns": g.duration_ns,
            "cause": g.cause, "evidence": evidence, "host_data": g.host_data,
            "details": {"launch_start_ns": g.launch_start_ns if launched else None,
                        "launch_tid": g.launch_tid if launched else None, "host_active_fraction": g.host_active}}


def _device_doc(d: DeviceSummary) -> dict[str, Any]:
    return {
        **{k: getattr(d, k) for k in ("rank", "device", "name", "sm_count", "span_ns", "busy_ns", "idle_ns", "kernel_ns",
                                      "memcpy_ns", "memset_ns", "comm_ns")},
        "overlap": msgspec.structs.asdict(d.overlap),
        "streams": [{k: getattr(s, k) for k in ("stream", "context", "green_context", "busy_ns", "kernels", "memcpys")}
                    for s in d.streams],
        "sm": {"source": d.sm.source, "busy_fraction": d.sm.busy_fraction,
               "partitions": [msgspec.structs.asdict(p) for p in d.sm.partitions], "excluded_wait_ns": d.sm.excluded_wait_ns},
    }


def _step_doc(s: StepInfo, rows: dict[tuple[int, int], StepRow]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "rank": s.rank, "index": s.index, "start_ns": s.start_ns, "end_ns": s.end_ns, "source": s.source
    }
    r = rows.get((s.rank, s.index))
    if r is not None:
        doc.update(duration_ns=r.duration_ns, gpu_busy_ns=r.gpu_busy_ns, gpu_idle_ns=r.gpu_idle_ns,
                   idle_by_cause=dict(r.idle_by_cause), blocking_syncs=r.blocking_syncs, kernels=r.kernels,
                   warmup=r.warmup, outlier=r.outlier, gpu_start_ns=r.gpu_start_ns if r.gpu_start_ns >= 0 else None,
                   gpu_end_ns=r.gpu_end_ns if r.gpu_end_ns >= 0 else None, host_ns=r.host_ns, gpu_ns=r.gpu_ns,
                   gpu_runs_into_next=r.gpu_runs_into_next)
    return doc


def document(analysis: Analysis, gap_evidence: Sequence[str] | None) -> dict[str, Any]:
    """The `analyze --json` document, schema 2 (DESIGN.md): schema 1 plus `steps`, `notes`,
    `findings[].data` and each gap's `host_data` and `details`. `gap_evidence` holds each gap's evidence
    text, in the order of `analysis.gaps` (tracelab.render.export.document builds it); None: the gaps list left
    empty (tracelab.render.export.document.write_document streams it)."""
    rows = {(r.rank, r.index): r for r in analysis.step_rows}
    return {
        "schema": SCHEMA_VERSION,
        "trace": {"source": analysis.trace.source, "format": analysis.trace.format, "ranks": list(analysis.trace.ranks)},
        "devices": [_device_doc(d) for d in analysis.devices],
        "steps": [_step_doc(s, rows) for s in analysis.steps],
        "setup": setup_document(analysis.setup),
        "gaps": gap_docs(analysis.gaps, gap_evidence) if gap_evidence is not None else [],
        "findings": [{k: getattr(f, k) for k in ("rule", "severity", "count", "wasted_ns", "message", "where", "data",
                                                 "scope")} for f in analysis.findings],
        "notes": list(analysis.notes),
    }


def gap_docs(gaps: Sequence[Gap], evidence: Sequence[str]) -> list[dict[str, Any]]:
    """The gaps as the document lists them (`gap_doc` each), with their evidence texts; from the columns
    of a GapTable (no Gap objects)."""
    with bulk_allocation():
        if isinstance(gaps, GapTable):
            return _gap_dicts(gaps, evidence)
        return [gap_doc(g, text) for g, text in zip(gaps, evidence, strict=True)]


def _gap_dicts(gaps: GapTable, evidence: Sequence[str]) -> list[dict[str, Any]]:
    cols = [gaps.column(n).tolist() for n in ("rank", "device", "start", "end", "launch_start", "launch_tid",
                                               "host_active")]
    causes = [CAUSES[k] for k in gaps.column("cause").tolist()]
    basis = [gaps.host_data_labels[k] for k in gaps.column("host_data").tolist()]
    return [
        {"rank": r, "device": d, "start_ns": s, "end_ns": e, "duration_ns": e - s, "cause": k, "evidence": text,
         "host_data": h, "details": {"launch_start_ns": ls if ls >= 0 else None, "launch_tid": lt if ls >= 0 else None,
                                     "host_active_fraction": ha}}
        for r, d, s, e, ls, lt, ha, k, h, text in zip(*cols, causes, basis, evidence, strict=True)
    ]

