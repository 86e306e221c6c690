"""Report writers (.html / .md / .json) on synthetic timelines with hostile names, and on corpus traces."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from tracelab.analyses import analyze
from tracelab.analyses.device.kernels import kernel_summary
from tracelab.analyses.results import Analysis, AnalysisOptions, Finding
from tracelab.api import report as write_report
from tracelab.errors import BadInput
from tracelab.model import CopyKind, DeviceInfo, EventKind, Flag, RunMeta, StringInterner, build_timeline
from tracelab.render.export.document import to_document
from tracelab.render.reports.markdown import md_escape
from tracelab.render.text.compare import shorten

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

HOSTILE = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "|pipe|",
    "line\nbreak",
)


# ---- synthetic runs -----------------------------------------------------------------------------------


def synthetic_timeline(
    *, iterations: int = 20, kernel_us: int = 40, gap_us: int = 30, source: str = "run<script>alert(1)</script>.json",
    names: tuple[str, ...] = HOSTILE, seed: int = 0, gpu_name: str | None = None,
):
    """A device with two streams: per iteration, a kernel per hostile name on stream 7, a memcpy on
    stream 8 overlapping the first kernel, and a host sync leaving an idle gap; host launches with
    correlation ids. With `gpu_name`, the device is described (an H100's limits) and kernels carry launch
    configurations, so per-SM lanes can be estimated. Deterministic."""
    rng = np.random.default_rng(seed)
    s = StringInterner()
    ids_kernel = s.intern_array(list(names))
    launch, sync, copy = s.intern_array(["cudaLaunchKernel", "cudaStreamSynchronize", "Memcpy HtoD (Pageable -> Device)"])
    cols: dict[str, list] = {k: [] for k in ("kind", "start", "end", "device", "stream", "pid", "tid", "name",
                                               "correlation", "bytes", "copy_kind", "flags", "sync_kind")}

    def add(kind, start, end, device, stream, name, corr=-1, nbytes=-1, copy_kind=0, flags=0, sync_kind=0, host=False):
        cols["kind"].append(int(kind))
        cols["start"].append(int(start))
        cols["end"].append(int(end))
        cols["device"].append(-1 if host else device)
        cols["stream"].append(-1 if host else stream)
        cols["pid"].append(100 if host else -1)
        cols["tid"].append(101 if host else -1)
        cols["name"].append(int(name))
        cols["correlation"].append(corr)
        cols["bytes"].append(nbytes)
        cols["copy_kind"].append(copy_kind)
        cols["flags"].append(flags)
        cols["sync_kind"].append(sync_kind)

    t = 1_000_000
    corr = 1
    for _ in range(iterations):
        first = t
        for nid in ids_kernel:
            dur = int(kernel_us * 1000 * (0.5 + rng.random()))
            add(EventKind.RUNTIME, t - 5_000, t - 3_000, 0, 0, launch, corr, flags=Flag.LAUNCH, host=True)
            add(EventKind.KERNEL, t, t + dur, 0, 7, nid, corr)
            corr += 1
            t += dur + 1_000
        add(EventKind.MEMCPY, first + 2_000, first + 12_000, 0, 8, copy, -1, nbytes=1 << 20, copy_kind=int(CopyKind.HTOD))
        add(EventKind.RUNTIME, t, t + gap_us * 1000, 0, 0, sync, -1, flags=Flag.BLOCKING, sync_kind=1, host=True)
        t += gap_us * 1000 + 2_000
    meta = RunMeta(source=source, format="kineto", workload="wl<b>bold</b>", variant="v|1", notes=("note <i>x</i>",),
                   extra={"host": HOSTILE[1], "distributedInfo": {"backend": HOSTILE[0], "rank": 0}})
    columns = {k: np.asarray(v) for k, v in cols.items()}
    devices = ()
    if gpu_name is not None:
        devices = (DeviceInfo(0, 0, gpu_name, sm_count=132, cc_major=9, max_threads_per_sm=2048, max_blocks_per_sm=32,
                              registers_per_sm=65536, max_registers_per_block=65536, shared_mem_per_sm=233472,
                              max_shared_mem_per_block=232448),)
        kernel = columns["kind"] == int(EventKind.KERNEL)
        for col, value in (("grid_x", 264), ("grid_y", 1), ("grid_z", 1), ("block_x", 256), ("block_y", 1),
                           ("block_z", 1), ("registers", 64), ("shared_mem", 0)):
            columns[col] = np.where(kernel, value, -1)
    return build_timeline(columns, s.strings, meta, devices=devices)


def analysis_of(timeline, options: AnalysisOptions | None = None) -> Analysis:
    """The real analysis (engineer C's `analyze`)."""
    return analyze(timeline, options or AnalysisOptions())


def hostile_analysis(timeline) -> Analysis:
    """The analysis with findings and gap evidence that quote hostile names (as real ones quote kernels)."""
    a = analysis_of(timeline)
    findings = (  # the hostile versions replace the real ones of the same rules
        *(f for f in a.findings if f.rule not in ("launch_bound", "sync_per_iteration")),
        Finding("launch_bound", "warning", 3, 120_000, f"tiny kernels {HOSTILE[0]} between launches", f"stream 7 {HOSTILE[1]}"),
        Finding("sync_per_iteration", "critical", 20, 600_000, f"sync after {HOSTILE[2]}", HOSTILE[3]),
    )
    # every gap's evidence quotes names (kernels, calls) from the details' string table: make them hostile
    d = a.gap_details
    details = replace(d, strings=tuple(f"{s} after {HOSTILE[1]}" for s in d.strings)) if d is not None else None
    return replace(a, findings=findings, gap_details=details)


# ---- checks ---------------------------------------------------------------------------------------------


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def assert_html_safe(text: str) -> _Tags:
    """No remote loads, no injected tags or handlers; hostile names only escaped."""
    for raw in ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<b>bold</b>", "<i>x</i>"):
        assert raw not in text
    p = _Tags()
    p.feed(text)
    p.close()
    assert p.tags, "no tags parsed"
    for tag, attrs in p.tags:
        assert tag != "img" and tag != "iframe" and tag != "object" and tag != "embed", tag
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("src", "href", "action", "data", "poster", "srcset"):
                v = (value or "").strip().lower()
                assert v.startswith(("#", "data:")) or v == "", (tag, name, value)
        if tag == "script":
            assert "src" not in attrs
        if tag == "link":
            assert False, f"external resource link {attrs}"
    return p


def test_md_escape():
    assert md_escape("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert md_escape("|pipe|") == "\\|pipe\\|"
    assert md_escape("a\nb\r\nc") == "a b c"
    assert md_escape("[x](http://e) ![i](x) `c` *b* _u_") == "\\[x\\](http://e) \\!\\[i\\](x) \\`c\\` \\*b\\* \\_u\\_"
    assert md_escape("a&lt;b") == "a&amp;lt;b"  # entities in names are shown, not decoded
    assert md_escape("x" * 300, 10) == "x" * 9 + "…"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_md_escape_property(text: str):
    out = md_escape(text)
    assert "\n" not in out and "\r" not in out and "<" not in out and ">" not in out
    unescaped = re.sub(r"\\.", "", out)  # drop every backslash escape: what is left is plain text
    for ch in "|`*_[]#!~\\":
        assert ch not in unescaped, (text, out)
    assert re.sub(r"&(?!amp;|lt;|gt;)", "", unescaped) == unescaped  # every & starts an entity we wrote


def test_each_format_written_and_escaped(tmp_path: Path):
    tl = synthetic_timeline()
    analysis = hostile_analysis(tl)
    html_path = write_report(tmp_path / "r.html", analysis, tl)
    md_path = write_report(tmp_path / "r.md", analysis, tl)
    json_path = write_report(tmp_path / "r.json", analysis, tl)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json", "r.md"]  # no temp files left

    doc = json.loads(json_path.read_text())
    # issue 27: a report written with its timeline adds the trace health, GPU time by range and GPU memory
    assert next(c["name"] for c in doc.pop("health")["checks"]) == "dropped"
    assert doc.pop("ranges")["nested_subtracted"] is False and "memory" in doc
    doc.pop("memory")
    # issue 24: the report adds the critical path of the steps (tests/test_critical_path.py checks it)
    doc.pop("critical_path", None)
    assert doc == json.loads(json.dumps(to_document(analysis)))
    assert doc["trace"]["source"] == tl.meta.source  # JSON keeps the text; json escaping makes it data

    md = md_path.read_text()
    for raw in HOSTILE[:2] + ("<b>bold</b>", "<i>x</i>"):
        assert raw not in md
    assert md_escape(HOSTILE[0]) in md and md_escape(HOSTILE[1]) in md
    assert "\\|pipe\\|" in md and "line break" in md
    assert f"| distributedInfo.backend | {md_escape(HOSTILE[0])} |" in md  # metadata shown, escaped
    # every table row keeps its column count (no name broke a table)
    for block in md.split("\n\n"):
        rows = [r for r in block.splitlines() if r.startswith("| ")]
        if rows:
            counts = {len(r.replace("\\|", "").split("|")) for r in rows}
            assert len(counts) == 1, block
    assert "## Top kernels by total time" in md and "## Per-stream utilization" in md
    # rendered by a real CommonMark + tables renderer with raw HTML allowed: no tag gets through, every
    # table keeps its shape, and readers see the literal names
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").enable("table").render(md)
    p = assert_html_safe(rendered)
    assert {t for t, _ in p.tags} <= {"h1", "h2", "h3", "p", "ul", "li", "strong", "code", "table", "thead", "tbody",
                                      "tr", "th", "td", "hr", "blockquote", "em"}
    shown = "".join(p.text)
    assert HOSTILE[0] in shown and HOSTILE[1] in shown and "|pipe|" in shown

    text = html_path.read_text()
    p = assert_html_safe(text)
    shown = "".join(p.text)
    for raw in HOSTILE[:2]:
        assert html.escape(raw) in text  # present, escaped
        assert raw in shown  # and a reader sees the literal name
    assert text.count("<script>") == 2  # plotly.js once, the figure script once
    assert text.count("Plotly.newPlot") == 1
    divs = [a["id"] for t, a in p.tags if t == "div" and a.get("class") == "fig"]
    assert len(divs) >= 7 and len(set(divs)) == len(divs)
    # the page's <title> is the report's heading, not the last activity figure's (issue 28)
    page_title = re.search(r"<title>(.*?)</title>", text, re.DOTALL).group(1)
    heading = re.search(r"<h1>(.*?)</h1>", text, re.DOTALL).group(1)
    assert page_title == heading and page_title.startswith("tracelab report: ")
    assert "activity" not in page_title


def test_kernel_table_in_reports(tmp_path: Path):
    tl = synthetic_timeline(names=("gemm_big", "elementwise", "reduce"), source="plain.json")
    ks = kernel_summary(tl)
    md = write_report(tmp_path / "k.md", analysis_of(tl), tl).read_text()
    html_text = write_report(tmp_path / "k.html", analysis_of(tl), tl).read_text()
    for name in ks["name"]:
        assert md_escape(name) in md and name in html_text
    # ranked by total time: the table lists them in kernel_summary order
    pos = [md.index(f"| {md_escape(n)} |") for n in ks["name"]]
    assert pos == sorted(pos)


def test_report_against_baseline(tmp_path: Path):
    base = synthetic_timeline(gap_us=60, source="base.json")
    var = synthetic_timeline(gap_us=20, source="var.json", names=(*HOSTILE, "new_kernel"))
    a_base, a_var = analysis_of(base), analysis_of(var)
    out = write_report(tmp_path / "cmp.json", a_var, var, against=(a_base, base))
    doc = json.loads(out.read_text())
    c = doc["comparison"]
    assert c["a"]["source"] == "base.json" and c["b"]["source"] == "var.json"
    d = c["devices"][0]
    assert d["idle_ns"]["a"] == a_base.devices[0].idle_ns and d["idle_ns"]["b"] == a_var.devices[0].idle_ns
    assert d["idle_ns"]["delta"] < 0
    names = {k["name"]: k for k in c["kernels"]}
    assert names["new_kernel"]["status"] == "b" and names["new_kernel"]["calls"]["a"] == 0
    md = write_report(tmp_path / "cmp.md", a_var, var, against=(a_base, base)).read_text()
    assert "## Comparison" in md and "base.json" in md and HOSTILE[0] not in md
    from markdown_it import MarkdownIt

    assert_html_safe(MarkdownIt("commonmark").enable("table").render(md))
    text = write_report(tmp_path / "cmp.html", a_var, var, against=(a_base, base)).read_text()
    assert_html_safe(text)
    assert ">Comparison</h2>" in text and "new\\_kernel" not in text and "new_kernel" in text


def test_bad_extension_and_atomicity(tmp_path: Path):
    tl = synthetic_timeline(iterations=2)
    a = analysis_of(tl)
    for name in ("r.txt", "r", "r.pdf"):
        with pytest.raises(BadInput) as err:
            write_report(tmp_path / name, a, tl)
        msg = str(err.value)
        assert "\n" not in msg and name in msg and ".html" in msg
    with pytest.raises(BadInput, match="does not exist"):
        write_report(tmp_path / "missing" / "r.md", a, tl)
    target = tmp_path / "keep.md"
    target.write_text("previous report")

    broken = replace(a, devices=(None,))  # rendering fails half-way: the old file stays, no temp file left
    with pytest.raises(AttributeError):
        write_report(target, broken, tl)
    assert target.read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.md"]


def test_empty_trace_reports(tmp_path: Path):
    tl = build_timeline({}, [], RunMeta(source="empty.json", format="kineto"))
    a = analysis_of(tl)
    for ext in ("html", "md", "json"):
        p = write_report(tmp_path / f"e.{ext}", a, tl)
        assert p.stat().st_size > 0
    assert "No findings." in (tmp_path / "e.md").read_text()
    assert_html_safe((tmp_path / "e.html").read_text())


# ---- corpus -----------------------------------------------------------------------------------------------


def _load(path: Path):
    parsers = pytest.importorskip("tracelab.io")
    if not hasattr(parsers, "load_trace"):
        pytest.skip("tracelab.io.load_trace not available yet")
    return parsers.load_trace(path)


CORPUS_TRACES = (
    "hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "hta/negative_queue_length_values_check__rank0.json.gz",
    "param/dlrm_kineto_8rank",  # a directory of 8 per-rank traces: 8 devices in one report
    "nsys_ai/tests__fixtures__h100_2gpu_1s.sqlite",  # nsys SQLite, 2 GPUs
)


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="corpus absent")
@pytest.mark.parametrize("rel", CORPUS_TRACES)
def test_corpus_reports(tmp_path: Path, rel: str):
    path = CORPUS / rel
    if not path.exists():
        pytest.skip(f"{rel} not in corpus")
    tl = _load(path)
    a = analysis_of(tl)
    assert a.devices, "corpus trace has GPU activity"
    if rel.startswith("param/dlrm_kineto_8rank"):
        assert len(a.devices) == 8
    html_path = write_report(tmp_path / "r.html", a, tl)
    md_path = write_report(tmp_path / "r.md", a, tl)
    json_path = write_report(tmp_path / "r.json", a, tl)
    assert json.loads(json_path.read_text())["schema"] == 2
    text = html_path.read_text()
    assert_html_safe(text)
    assert html_path.stat().st_size < 5_000_000
    for d in a.devices:  # every device has its card
        assert f"rank {d.rank} · GPU {d.device}" in text
    md = md_path.read_text()
    top = kernel_summary(tl)["name"].iloc[0]
    assert md_escape(top, 120, middle=True) in md
    assert html.escape(shorten(top, 160), quote=True) in text


@pytest.mark.parametrize("devices,streams", [(1, 8), (8, 60)])
def test_report_size_is_bounded_for_large_runs(tmp_path: Path, devices: int, streams: int):
    """200k kernels (1 GPU x 8 streams, or 8 GPUs x 60 streams): figures are binned and capped, so the
    report stays small whatever the number of events, devices and streams."""
    n = 200_000
    rng = np.random.default_rng(1)
    s = StringInterner()
    names = s.intern_array([f"kernel_{i % 500}<T{i % 7}>" for i in range(n)])
    dur = rng.integers(1_000, 20_000, n)
    start = np.cumsum(rng.integers(500, 25_000, n))
    dev = rng.integers(0, devices, n)
    tl = build_timeline(
        {"kind": np.full(n, int(EventKind.KERNEL)), "start": start, "end": start + dur, "device": dev, "rank": dev,
         "stream": rng.integers(0, streams, n), "name": names},
        s.strings, RunMeta(source="big.json", format="kineto", ranks=tuple(range(devices))),
    )
    a = analysis_of(tl)
    assert len(a.devices) == devices
    p = write_report(tmp_path / "big.html", a, tl)
    from plotly.offline import get_plotlyjs

    extra = p.stat().st_size - len(get_plotlyjs().encode())
    assert extra < 250_000, extra  # everything but plotly.js
    assert p.stat().st_size < 5_000_000
    text = p.read_text()
    assert_html_safe(text)
    if devices * (streams + 1) > 64:
        assert "less busy streams not shown" in text and "busiest streams of each device" in text

def test_html_report_falls_back_to_compact_over_budget(tmp_path: Path, monkeypatch):
    """A report that would pass the size budget is re-rendered with less detail (and says so). The
    budget (5 MB) is lowered here so that a small run crosses it."""
    from tracelab.render.reports import write as reports

    tl = synthetic_timeline(iterations=5)
    many = tuple(Finding("launch_bound", "warning", i, 1000 + i, f"finding {i} " + "x" * 700, "w" * 700) for i in range(400))
    a = replace(analysis_of(tl), findings=many)
    full = write_report(tmp_path / "full.html", a, tl)
    assert "compact report" not in full.read_text() and "300 more findings" in full.read_text()
    monkeypatch.setattr(reports, "HTML_BUDGET_BYTES", full.stat().st_size - 1)
    small = write_report(tmp_path / "small.html", a, tl)
    text = small.read_text()
    assert small.stat().st_size < full.stat().st_size and "compact report" in text
    assert "375 more findings in the .json report" in text
    assert "finding 399 " in text and "finding 0 " not in text  # the costliest are kept
    assert_html_safe(text)
    md = write_report(tmp_path / "r.md", a, tl).read_text()
    assert "370 more findings in the .json report." in md and "finding 399 " in md and "finding 0 " not in md


def test_reports_without_timeline(tmp_path: Path):
    """From an analysis alone (e.g. a stored analyze --json): no kernel table, no binned figures."""
    tl = synthetic_timeline(iterations=3, names=("k1", "k2"))
    a = analysis_of(tl)
    md = write_report(tmp_path / "a.md", a, None).read_text()
    assert "## Devices" in md and "Top kernels" not in md
    text = write_report(tmp_path / "a.html", a, None).read_text()
    assert_html_safe(text)
    assert 'id="devices"' in text and 'id="kernels"' not in text and 'id="utilization"' not in text


def _dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def test_bundled_run_reports_are_under_5mb(tmp_path: Path):
    """Every bundled demo run (recorded on an H200), the largest included: HTML report under 5 MB."""
    demo = pytest.importorskip("tracelab.demo")
    if not hasattr(demo, "demo_run_paths") or not demo.demo_archives():
        pytest.skip("no bundled runs in this build")
    paths = demo.demo_run_paths(cache=tmp_path / "cache")
    largest = max(paths, key=_dir_size)
    sizes = {}
    for run in paths:
        tl = _load(run)
        out = write_report(tmp_path / f"{run.name}.html", analysis_of(tl), tl)
        sizes[run.name] = out.stat().st_size
    assert max(sizes.values()) < 5_000_000, max(sizes.items(), key=lambda kv: kv[1])
    assert "compact report" not in (tmp_path / f"{largest.name}.html").read_text()  # fits with full detail
    assert_html_safe((tmp_path / f"{largest.name}.html").read_text())

DATA = Path(__file__).resolve().parent / "data"


def _recorded_fixtures() -> list[Path]:
    """Recorded runs (directories with meta.json) and trace files under tests/data (engineer G's)."""
    if not DATA.is_dir():
        return []
    # tests/data/multigpu keeps its nsys exports xz-compressed (tests/test_gpu_steps.py unpacks them)
    runs = sorted({p.parent for p in DATA.rglob("meta.json") if "multigpu" not in p.parts})
    files = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json.gz", ".sqlite", ".pt.trace.json"))
                   and not any(r in p.parents for r in runs))
    return [*runs, *files]


@pytest.mark.parametrize("fixture", _recorded_fixtures() or [None], ids=lambda p: p.name if p else "none")
def test_recorded_fixture_reports(tmp_path: Path, fixture: Path | None):
    if fixture is None:
        pytest.skip("no recorded fixtures in tests/data yet")
    tl = _load(fixture)
    a = analysis_of(tl)
    for ext in ("html", "md", "json"):
        out = write_report(tmp_path / f"r.{ext}", a, tl)
        assert out.stat().st_size > 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert "checks" in doc.pop("health")  # issue 27: health, ranges and memory of a report with its timeline
    assert "ranges" in doc.pop("ranges")
    doc.pop("memory")
    assert "critical_path" in doc  # issue 24: the report adds the critical path (tests/test_critical_path.py)
    doc.pop("critical_path")
    assert doc == json.loads(json.dumps(to_document(a)))
    text = (tmp_path / "r.html").read_text()
    assert_html_safe(text)
    assert (tmp_path / "r.html").stat().st_size < 5_000_000
    md = (tmp_path / "r.md").read_text()
    for d in a.devices:
        assert f"r{d.rank}/d{d.device}" in md
