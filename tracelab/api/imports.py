"""Imports that run elsewhere: a multi-rank run parsed on Dask workers (`tracelab.distributed`), an
upload parsed in a child process under a budget (`tracelab.sandbox`). Both end in `runs.store_timeline`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .runs import Imported, import_trace

if TYPE_CHECKING:
    from ..io.detect import Progress
    from ..store import Store


def import_path(
    store: Store,
    path: str | Path,
    name: str | None = None,
    *,
    replace: bool = False,
    phase: Callable[[str], Progress | None] = lambda _label: None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> Imported:
    """Import one trace (file or directory) through `import_trace`, or a directory / glob of per-rank
    traces as one multi-rank run (`tracelab.distributed`: parsed on `workers` local Dask processes or on
    `scheduler`). `phase(label)` gives the progress callback of each phase (parsing, storing)."""
    from .. import distributed

    if distributed.is_rank_set(path):
        rid, new = distributed.import_rank_set(
            Path(path), store, name, replace=replace, parse_progress=phase("parsing ranks"),
            store_progress=phase("storing"), workers=workers, scheduler=scheduler,
        )
        return Imported(rid, new)
    return import_trace(
        path, store, name, replace=replace, parse_progress=phase("parsing"), store_progress=phase("storing")
    )


def import_upload(db: str | Path, path: str | Path, **limits: Any) -> dict[str, Any]:
    """Size-check, parse and import an uploaded file in a child process under a budget
    (`tracelab.sandbox.import_upload`: name, source, max_expanded_bytes, budget)."""
    from ..sandbox import import_upload as limited

    return limited(db, path, **limits)
