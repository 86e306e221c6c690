"""`tracelab report RUN -o FILE`: write the report in the format the extension names.

.html / .htm -> self-contained HTML (report_html), .md / .markdown -> Markdown (report_md),
.json -> the `analyze --json` document (plus a "comparison" key with --against).
With `against=(baseline_analysis, baseline_timeline)` the report also compares: baseline = A, this run = B.
The file is written atomically: rendered in memory, written to a temporary file next to the target,
then renamed over it, so a failure never leaves a half-written report.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import orjson

from tracelab.analyses.compare import Comparison, compare
from tracelab.analyses.kernels import kernel_summary
from tracelab.analyses.results import Analysis
from tracelab.errors import BadInput, MissingDependency
from tracelab.model import Timeline
from tracelab.render.document import to_document
from tracelab.text_format import fmt_ranks

FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


MAX_EXTRA_ROWS = 12
HTML_BUDGET_BYTES = 5_000_000  # an HTML report over this is re-rendered with less detail (plotly.js alone is ~4.8 MB)


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


def report_format(path: str | Path) -> str:
    """'html' | 'md' | 'json' from the file extension; BadInput for anything else."""
    suffix = Path(path).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        shown = suffix or "no extension"
        raise BadInput(f"unknown report format ({shown}); use .html, .md or .json", path)
    return fmt


def report_document(analysis: Analysis, comparison: Comparison | None = None) -> dict:
    from tracelab.render.compare_text import comparison_document

    doc = to_document(analysis)
    if comparison is not None:
        doc["comparison"] = comparison_document(comparison)
    return doc


def render_report(
    fmt: str,
    analysis: Analysis,
    timeline: Timeline | None,
    *,
    against: tuple[Analysis, Timeline | None] | None = None,
) -> bytes:
    """The report's bytes in format `fmt` ('html' | 'md' | 'json')."""
    comparison = None
    labels: tuple[str, str] | None = None
    if against is not None:
        base_analysis, base_timeline = against
        comparison = compare(base_analysis, analysis, base_timeline, timeline)
        labels = (report_title(base_analysis, base_timeline), report_title(analysis, timeline))
    if fmt == "json":
        doc = report_document(analysis, comparison)
        if timeline is not None:  # the trace health, GPU time by range and GPU memory of `analyze --json`
            from tracelab.render.report_extras import extras_doc

            doc.update(extras_doc(timeline, analysis))
        from tracelab.render.critical_path_text import report_critical_path

        cpath = report_critical_path(analysis, timeline)
        if cpath is not None:
            from tracelab.analyses.critical_path import critical_path_document

            doc["critical_path"] = critical_path_document(cpath)
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    kernels = kernel_summary(timeline) if timeline is not None else None
    if fmt == "md":
        from tracelab.render.report_md import render_markdown

        return render_markdown(analysis, timeline, kernels, comparison, labels=labels).encode("utf-8")
    if fmt == "html":
        try:
            from tracelab.render.report_html import render_html
        except ImportError as exc:  # plotly is an optional dependency (the `app` extra)
            raise MissingDependency(
                f"HTML reports need plotly ({exc.name} is missing): pip install 'tracelab[app]'"
            ) from exc
        from tracelab.render.report_html import COMPACT

        data = render_html(analysis, timeline, kernels, comparison, labels=labels).encode("utf-8")
        if len(data) > HTML_BUDGET_BYTES:  # keep the promise: less detail rather than a huge file
            data = render_html(analysis, timeline, kernels, comparison, limits=COMPACT, labels=labels).encode("utf-8")
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
            raise BadInput(
                f"is inside the input directory {source}: the output would become part of the run it reads "
                "(choose another -o)",
                path,
            )
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
        _unlink(tmp)
        if isinstance(exc, BrokenPipeError):
            raise
        raise BadInput(f"cannot write ({exc.strerror or exc}); nothing was written", path) from None
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and a rename."""
    check_output_path(path)
    with atomic_file(path) as fh:
        fh.write(data)


def write_report(
    path: str | Path,
    analysis: Analysis,
    timeline: Timeline | None,
    *,
    against: tuple[Analysis, Timeline | None] | None = None,
) -> Path:
    """Write the report of `analysis` (and `timeline`, for kernels and utilization over time) to `path`,
    in the format its extension names. Returns the path written."""
    path = Path(path)
    fmt = report_format(path)
    data = render_report(fmt, analysis, timeline, against=against)
    write_atomic(path, data)
    return path
