"""What a report says about the run it covers: its title and metadata rows (raw: the writers escape them)."""

from __future__ import annotations

from pathlib import Path

from tracelab.analyses.results import Analysis
from tracelab.model import Timeline
from tracelab.text_format import fmt_ranks

MAX_EXTRA_ROWS = 12


def report_title(analysis: Analysis, timeline: Timeline | None) -> str:
    """What the report is about, raw (escape it): 'workload · variant (backend, GPU)' for recorded
    runs, else the trace's file or directory name (the full path is in the metadata)."""
    m = timeline.meta if timeline is not None else None
    if m is not None and m.workload:
        detail = ", ".join(x for x in (m.backend, m.gpu) if x)
        return " · ".join(x for x in (m.workload, m.variant) if x) + (f" ({detail})" if detail else "")
    source = analysis.trace.source.rstrip("/\\")
    return Path(source).name or source or "trace"


def metadata_rows(analysis: Analysis, timeline: Timeline | None) -> list[tuple[str, str]]:
    """(label, value) rows describing the run, raw (untrusted: the caller escapes them): trace, run
    metadata, parser statistics, scalar metadata of `meta.extra` (one level deep), notes."""
    rows = [
        ("source", analysis.trace.source),
        ("format", analysis.trace.format),
        ("ranks", fmt_ranks(analysis.trace.ranks)),
        ("gap threshold", f"{analysis.options.gap_threshold_ns / 1e3:g} µs"),
    ]
    notes = list(analysis.notes)
    if timeline is not None:
        m = timeline.meta
        for label, value in (("workload", m.workload), ("variant", m.variant), ("backend", m.backend),
                             ("GPU", m.gpu), ("schema", m.schema_version)):
            if value:
                rows.append((label, str(value)))
        rows.append(("events", f"{len(timeline.events):,}"))
        if m.stats:
            rows.append(("parser statistics", " · ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                                                          for k, v in m.stats.items())))
        extra: list[tuple[str, str]] = []
        for key, value in m.extra.items():
            if isinstance(value, (str, int, float, bool)):
                extra.append((str(key), str(value)))
            elif isinstance(value, dict) and len(value) <= 8:
                extra += [(f"{key}.{k}", str(v)) for k, v in value.items() if isinstance(v, (str, int, float, bool))]
        rows += extra[:MAX_EXTRA_ROWS]
        notes += [n for n in m.notes if n not in notes]
    rows += [("note", n) for n in notes]
    return rows
