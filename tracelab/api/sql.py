"""SQL over the store: one read-only SELECT over its views (tracelab/store/sql.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .analysis import analyze

if TYPE_CHECKING:
    from ..store import Store


def sql(
    query: str,
    store: Store,
    runs: tuple[str, ...] | list[str] | None = None,
    *,
    cache: Any = None,
    max_rows: int | None = None,
) -> Any:
    """Run one read-only SELECT over the store's SQL views (tracelab/store/sql.py; DESIGN.md "SQL views"):
    a `SqlResult`. `runs`: run ids / prefixes / names whose event and analysis views are filled (default:
    every run); `cache`: a `ViewCache` kept between queries. BadInput for SQL that fails or would write."""
    from ..store.sql import query as run_query

    records = store.runs()
    if runs:
        wanted = list(dict.fromkeys(store.resolve(r) for r in runs))
        records = [r for r in records if r.id in wanted]
    runs_rows = {
        "run_id": [r.id for r in records],
        "name": [r.name for r in records],
        "source": [r.source for r in records],
        "format": [r.format for r in records],
        "backend": [r.backend for r in records],
        "workload": [r.workload for r in records],
        "variant": [r.variant for r in records],
        "gpu": [r.gpu for r in records],
        "created": [r.created for r in records],
        "events": [r.events for r in records],
        "start_ns": [r.start_ns for r in records],
        "end_ns": [r.end_ns for r in records],
        "ranks": [len(r.ranks) for r in records],
    }

    def fill(rid: str, views: frozenset[str]) -> dict[str, Any]:
        from tracelab.analyses import sql_rows

        tl = store.load(rid)
        out: dict[str, Any] = {}
        if "events" in views:
            out["events"] = sql_rows.event_rows(rid, tl)
        if "kernels" in views:
            out["kernels"] = sql_rows.kernel_rows(rid, tl)
        if "ranges" in views:
            out["ranges"] = sql_rows.range_rows(rid, tl)
        if "collectives" in views:
            out["collectives"] = sql_rows.collective_rows(rid, tl)
        if views & {"gaps", "steps", "findings"}:
            an = analyze(tl)
            if "gaps" in views:
                from tracelab.render.text.gap_evidence import gap_evidence

                out["gaps"] = sql_rows.gap_rows(rid, an, gap_evidence(an))
            if "steps" in views:
                out["steps"] = sql_rows.step_rows(rid, an)
            if "findings" in views:
                out["findings"] = sql_rows.finding_rows(rid, an)
        return out

    return run_query(query, [(r.id, r.created) for r in records], runs_rows, fill, cache=cache, max_rows=max_rows)


