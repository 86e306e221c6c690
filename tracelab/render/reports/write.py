"""`tracelab report RUN -o FILE`: write the report in the format the extension names.

.html / .htm -> self-contained HTML (report_html), .md / .markdown -> Markdown (report_md),
.json -> the `analyze --json` document (plus a "comparison" key with --against).
With `against=(baseline_analysis, baseline_timeline)` the report also compares: baseline = A, this run = B.
What the report shows besides the analysis (comparison, kernel table, health, ranges, memory, critical
path) is computed by the api (`tracelab.api.report_parts`) and handed in as `ReportParts`: nothing here
runs an analysis. The file is written atomically: rendered in memory, written to a temporary file next to the target,
then renamed over it, so a failure never leaves a half-written report.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec
import orjson

from tracelab.analyses.comparison import Comparison
from tracelab.analyses.results import Analysis
from tracelab.errors import BadInput, MissingDependency
from tracelab.model import Timeline
from tracelab.render.export.document import to_document
from tracelab.render.reports.meta import metadata_rows, report_title

if TYPE_CHECKING:
    import pandas as pd

    from tracelab.analyses.device.gpu_memory import MemoryTimeline
    from tracelab.analyses.device.range_projection import RangeProjection
    from tracelab.analyses.health import Health
    from tracelab.analyses.ranks.path_model import CriticalPath

__all__ = ["ReportParts", "check_output_path", "metadata_rows", "render_report", "report_format", "report_title",
           "write_report"]

FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}
HTML_BUDGET_BYTES = 5_000_000  # an HTML report over this is re-rendered with less detail (plotly.js alone is ~4.8 MB)


class ReportParts(msgspec.Struct, frozen=True):
    """What a report shows besides the analysis, computed by the api: the comparison with a baseline and
    the runs' labels (A, B), the kernel table (html / md), the trace health, GPU time by range and GPU
    memory (`extras`), and the critical path (None without one)."""

    comparison: Comparison | None = None
    labels: tuple[str, str] | None = None
    kernels: pd.DataFrame | None = None
    extras: tuple[Health, RangeProjection, MemoryTimeline | None] | None = None
    critical_path: CriticalPath | None = None


def report_format(path: str | Path) -> str:
    """'html' | 'md' | 'json' from the file extension; BadInput for anything else."""
    suffix = Path(path).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        shown = suffix or "no extension"
        raise BadInput(f"unknown report format ({shown}); use .html, .md or .json", path)
    return fmt


def report_document(analysis: Analysis, comparison: Comparison | None = None) -> dict:
    from tracelab.render.export.comparison import comparison_document

    doc = to_document(analysis)
    if comparison is not None:
        doc["comparison"] = comparison_document(comparison)
    return doc


def render_report(fmt: str, analysis: Analysis, timeline: Timeline | None, parts: ReportParts = ReportParts()) -> bytes:
    """The report's bytes in format `fmt` ('html' | 'md' | 'json')."""
    comparison, labels, kernels = parts.comparison, parts.labels, parts.kernels
    if fmt == "json":
        doc = report_document(analysis, comparison)
        if parts.extras is not None:  # the trace health, GPU time by range and GPU memory of `analyze --json`
            from tracelab.render.reports.extras import ranges_doc

            h, p, m = parts.extras
            doc.update({"health": h.to_dict(), "ranges": ranges_doc(p), "memory": None if m is None else m.to_dict()})
        if parts.critical_path is not None:
            from tracelab.analyses.ranks.critical_path import critical_path_document

            doc["critical_path"] = critical_path_document(parts.critical_path)
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    if fmt == "md":
        from tracelab.render.reports.markdown import render_markdown

        return render_markdown(analysis, timeline, kernels, comparison, labels=labels, extras=parts.extras,
                               critical_path=parts.critical_path).encode("utf-8")
    if fmt == "html":
        try:
            from tracelab.render.reports.html import render_html
        except ImportError as exc:  # plotly is an optional dependency (the `app` extra)
            raise MissingDependency(f"HTML reports need plotly ({exc.name} is missing): pip install 'tracelab[app]'") from exc
        from tracelab.render.reports.html_page import COMPACT

        more = {"labels": labels, "extras": parts.extras, "critical_path": parts.critical_path}
        data = render_html(analysis, timeline, kernels, comparison, **more).encode("utf-8")
        if len(data) > HTML_BUDGET_BYTES:  # keep the promise: less detail rather than a huge file
            data = render_html(analysis, timeline, kernels, comparison, limits=COMPACT, **more).encode("utf-8")
        return data
    raise BadInput(f"unknown report format {fmt!r}; use html, md or json")


def _same_file(a: Path, b: Path) -> bool:
    """Whether a and b name one file: the same path once symlinks are resolved, or one inode (a hard
    link). A path that does not exist is no file."""
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, RuntimeError):  # a symlink loop, an unreadable directory
        return False


def _inside(path: Path, directory: Path) -> bool:
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError):
        return False


def check_output_path(path: str | Path, inputs: Iterable[str | Path | None] = ()) -> Path:
    """Fail at once (BadInput, one line naming the file) when `path` cannot be written: its directory
    is missing or not writable, it is a directory, or it is (or links to) one of `inputs` (the trace
    read, the baseline, the store: `report t.json -o t.json` would replace the trace with its report).
    Commands call this before any work."""
    path = Path(path)
    for given in inputs:
        if given is None or str(given) == "":
            continue
        source = Path(given)
        if source.exists() and _same_file(path, source):
            what = "the input" if path.name == source.name else f"the input {source}"
            raise BadInput(f"is {what}: refusing to overwrite it with the output (choose another -o)", path)
        if source.is_dir() and _inside(path, source):
            raise BadInput(f"is inside the input directory {source}: the output would become part of the run it reads "
                           "(choose another -o)", path)
    directory = path.parent
    if not directory.is_dir():
        raise BadInput(f"directory {directory} does not exist", path)
    if path.is_dir():
        raise BadInput("is a directory, not a file", path)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BadInput(f"directory {directory} is not writable", path)
    return path


@contextmanager
def atomic_file(path: Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """A file handle on a temporary file beside `path`, renamed over `path` (mode 0644) when the block
    ends normally and deleted when it raises: a reader never sees a half-written file."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise BadInput(f"cannot write here: {exc.strerror}", path) from exc
    try:
        with os.fdopen(fd, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk, a quota, an I/O error: one line naming the output, not the temp
        with suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, BrokenPipeError):
            raise
        raise BadInput(f"cannot write ({exc.strerror or exc}); nothing was written", path) from None
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and a rename."""
    check_output_path(path)
    with atomic_file(path) as fh:
        fh.write(data)


def write_report(path: str | Path, analysis: Analysis, timeline: Timeline | None, parts: ReportParts = ReportParts()) -> Path:
    """Write the report of `analysis` (and `timeline`, for utilization over time; `parts`: what the api
    computed for it) to `path`, in the format its extension names. Returns the path written."""
    path = Path(path)
    fmt = report_format(path)
    write_atomic(path, render_report(fmt, analysis, timeline, parts))
    return path
