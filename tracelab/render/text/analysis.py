"""Human `tracelab analyze` output: a compact table per device, per-stream lines, the top gaps with
their causes and evidence, the findings with evidence, and the notes. Pure: Analysis -> rich
renderables (or a plain string). Every untrusted name goes through `term_safe` and into `Text`, so
neither rich markup nor terminal escapes in kernel names can do anything."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable
from itertools import zip_longest

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from tracelab.analyses.results import Analysis, DeviceSummary, Finding, GapTable, cause_totals, longest_gaps
from tracelab.analyses.steps.steady import SteadyStepTime, steady_step_time
from tracelab.render.format import run_origin
from tracelab.render.text.compare import term_safe
from tracelab.render.text.findings import describe
from tracelab.render.text.gap_evidence import gap_evidence
from tracelab.text_format import fmt_ns, fmt_offset, fmt_share

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
CAUSE_STYLE = {"host_sync": "red", "launch_latency": "yellow", "dependency_wait": "magenta", "input_wait": "cyan",
               "profiler": "blue"}


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _table(title: str | Text, *columns: str) -> Table:
    """A titled table in the analysis' style; a column name starting with '>' is right-aligned."""
    t = Table(title=Text(title, style="bold") if isinstance(title, str) else title, title_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for c in columns:
        t.add_column(c.removeprefix(">"), justify="right" if c.startswith(">") else "left")
    return t


def device_title(d: DeviceSummary) -> str:
    name = term_safe(d.name, 60) or "unknown GPU"
    sms = f", {d.sm_count} SMs" if d.sm_count else ""
    return f"rank {d.rank} · GPU {d.device} · {name}{sms}"


def device_table(d: DeviceSummary) -> Table:
    """Span, busy, idle, per-kind time and overlap of one device: value and share of the span."""
    t = _table(device_title(d), "", ">time", ">of span", "", ">overlap", ">of span")
    t.columns[0].style = t.columns[3].style = "dim"
    ov = d.overlap
    left = [
        ("span", d.span_ns, ""),
        ("busy", d.busy_ns, fmt_share(d.busy_ns, d.span_ns)),
        ("idle", d.idle_ns, fmt_share(d.idle_ns, d.span_ns)),
        (f"kernels ({d.kernels})", d.kernel_ns, fmt_share(d.kernel_ns, d.span_ns)),
        (f"memcpy ({d.memcpys})", d.memcpy_ns, fmt_share(d.memcpy_ns, d.span_ns)),
        (f"memset ({d.memsets})", d.memset_ns, fmt_share(d.memset_ns, d.span_ns)),
        ("comm", d.comm_ns, fmt_share(d.comm_ns, d.span_ns)),
    ]
    right = [("compute/compute", ov.compute_compute_ns), ("compute/copy", ov.compute_copy_ns),
             ("compute/comm", ov.compute_comm_ns), ("copy/copy", ov.copy_copy_ns)]
    for (label, ns, pct), r in zip_longest(left, right):
        t.add_row(label, fmt_ns(ns), pct, *((r[0], fmt_ns(r[1]), fmt_share(r[1], d.span_ns)) if r else ("", "", "")))
    return t


def stream_lines(d: DeviceSummary) -> Text:
    out = Text()
    for i, s in enumerate(sorted(d.streams, key=lambda s: -s.busy_ns)):
        if i:
            out.append("\n")
        where = []
        if s.context is not None and s.context >= 0:
            where.append(f"ctx {s.context}")
        if s.green_context is not None and s.green_context >= 0:
            where.append(f"green ctx {s.green_context}")
        loc = f" ({', '.join(where)})" if where else ""
        work = [_count(s.kernels, "kernel")] if s.kernels or not (s.memcpys or s.memsets) else []
        if s.memcpys:
            work.append(_count(s.memcpys, "memcpy"))
        if s.memsets:
            work.append(_count(s.memsets, "memset"))
        out.append(f"  stream {s.stream}{loc}: ", style="bold")
        out.append(f"busy {fmt_ns(s.busy_ns)} ({fmt_share(s.busy_ns, d.span_ns)} of span), {', '.join(work)}")
    return out


def sm_line(d: DeviceSummary) -> Text | None:
    sm = d.sm
    if sm.source == "none":
        return None
    out = Text(f"  SMs ({sm.source}): busy {100.0 * sm.busy_fraction:.1f}%")
    for p in sm.partitions:
        label = "rest of device" if p.green_context is None else f"green ctx {p.green_context}"
        out.append(f"; {label}: {p.sm_count} SMs, busy {100.0 * p.busy_fraction:.1f}%")
    return out


def _steps_gaps_first(analysis: Analysis, table: GapTable, top: int) -> list:
    """The gaps to list: the longest ones after each rank's set-up first (the steps' gaps), then the
    set-up's when room is left (analyses.setup.steps_gaps_first, as the dashboard's Gaps page lists them)."""
    from tracelab.analyses.steps.setup_phase import steps_gaps_first

    if not analysis.setup:
        return longest_gaps(table, top)
    return steps_gaps_first(table, analysis.setup, top)


def setup_line(analysis: Analysis) -> Text | None:
    """One line on what ran before the first step (None without steps or set-up)."""
    from tracelab.render.text.setup import setup_sentence

    sentence = setup_sentence(analysis, run_origin(analysis))
    if sentence is None:
        return None
    line = Text("Set-up (before the first step): ", style="bold")
    line.append(term_safe(sentence, 400))
    return line


def gaps_table(analysis: Analysis, top: int = 10) -> RenderableType | None:
    table = GapTable.of(analysis.gaps)  # counted from the columns: no object per gap
    n = len(table)
    if not n:
        return None
    origin = run_origin(analysis)
    summary = ", ".join(f"{cause} {count}× {fmt_ns(ns)}" for cause, count, ns in cause_totals(table))
    threshold = fmt_ns(analysis.options.gap_threshold_ns)
    title = Text(f"Idle gaps ≥ {threshold}: {n} ({summary})", style="bold")
    t = _table(title, "where", ">at", ">length", "cause")
    t.add_column("evidence", overflow="fold")
    shown = _steps_gaps_first(analysis, table, top)
    for g, evidence in zip(shown, gap_evidence(analysis, shown)):
        t.add_row(f"r{g.rank} GPU {g.device}", fmt_offset(g.start_ns, origin), fmt_ns(g.duration_ns),
                  Text(g.cause, style=CAUSE_STYLE.get(g.cause, "")), Text(term_safe(evidence, 600)))
    if n > top:
        t.caption = f"{n - top} shorter gaps not shown (--json lists all)"
        t.caption_justify = "left"
    return t


def findings_table(findings: Iterable[Finding]) -> Table | None:
    order = {"critical": 0, "warning": 1, "info": 2}
    # set-up findings after the steps' ones: they do not lead
    items = sorted(findings, key=lambda f: (f.scope == "setup", order.get(f.severity, 3), -f.wasted_ns))
    if not items:
        return None
    t = _table(f"Findings: {len(items)}", "severity", "rule", ">count", ">lost")
    t.columns[1].no_wrap = True
    t.add_column("evidence", overflow="fold", ratio=1)
    for f in items:
        message, where = (f.message, f.where) if f.message else describe(f)  # analyses.analyze leaves prose out
        if f.scope == "setup" and not message.startswith("In the set-up"):
            message = f"In the set-up, before the first step (not counted in the steps' figures): {message}"
        evidence = Text(term_safe(message, 400))
        if where:
            evidence.append("\nwhere: " + term_safe(where, 300), style="dim")
        t.add_row(Text(f.severity, style=SEVERITY_STYLE.get(f.severity, "")), Text(f.rule, style="bold"), str(f.count),
                  fmt_ns(f.wasted_ns) if f.wasted_ns else "-", evidence)
    return t


def describe_steady(st: SteadyStepTime) -> str:
    """One line: the steady-state GPU step time and what it is the median of."""
    ranks = f", rank {st.rank}, the slowest of {len(st.per_rank)} ranks" if len(st.per_rank) > 1 else ""
    return f"steady-state GPU step: {fmt_ns(st.ns)} (median of {st.steps} steps after warm-up{ranks})"


SHORT_CAUSE = {"launch_latency": "launch", "host_sync": "sync", "dependency_wait": "dep", "no_work": "no work",
               "input_wait": "input", "profiler": "profiler"}


def steps_table(analysis: Analysis, top: int = 12) -> RenderableType | None:
    """The per-step table: duration, GPU busy / idle, idle by cause, syncs, kernels, warm-up / outlier."""
    rows = analysis.step_rows
    if not rows:
        return None
    sources = sorted({r.source for r in rows})
    title = Text(f"Steps: {len(rows)} ({', '.join(sources)})", style="bold")
    t = _table(title)
    # a rank with several GPUs: idle is when none of them works, the causes add each GPU's gaps
    per_rank = Counter(d.rank for d in analysis.devices)
    several = max(per_rank.values(), default=1) > 1
    for col, just in (("step", "left"), ("GPU time", "right"), ("host", "right"), ("GPU busy", "right"),
                      ("idle (no GPU busy)" if several else "idle", "right"),
                      ("idle by cause (each GPU's gaps, added)" if several else "idle by cause", "left"),
                      ("syncs", "right"), ("kernels", "right"), ("", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    notes = []
    if several:
        notes.append(
            f"ranks with {max(per_rank.values())} GPUs: a step's idle is the time none of its GPUs was busy; "
            "idle by cause adds up the gaps of each GPU, so it can be larger"
        )
    shown = rows if len(rows) <= top else rows[: top // 2] + rows[-(top - top // 2):]
    for r in shown:
        causes = ", ".join(
            f"{SHORT_CAUSE.get(c, c)} {fmt_ns(ns)}" for c, ns in sorted(r.idle_by_cause, key=lambda x: -x[1]) if ns
        )
        flag = "warm-up" if r.warmup else ("outlier" if r.outlier else "")
        if r.gpu_runs_into_next:
            flag = (flag + ", " if flag else "") + "GPU runs into next"
        t.add_row(
            f"r{r.rank} #{r.index}", fmt_ns(r.gpu_ns) if r.gpu_start_ns >= 0 else "-", fmt_ns(r.duration_ns),
            fmt_share(r.gpu_busy_ns, r.duration_ns), fmt_ns(r.gpu_idle_ns),
            causes or "-", str(r.blocking_syncs), str(r.kernels), Text(flag, style="yellow" if flag else ""),
        )
    steady = steady_step_time(rows)
    if steady is not None:
        notes.insert(0, describe_steady(steady))
    notes.append(
        "GPU time: first start to last end of the GPU work launched in the step; host: the host range that "
        "launched it; GPU busy / idle / causes: within the host range"
    )
    if len(rows) > top:
        notes.append(f"{len(rows) - top} steps in the middle not shown (--json lists all)")
    if notes:
        t.caption = "\n".join(notes)
        t.caption_justify = "left"
    return t


def analysis_renderables(
    analysis: Analysis, *, title: str | None = None, top_gaps: int = 10
) -> list[RenderableType]:
    tr = analysis.trace
    ranks = ",".join(str(r) for r in tr.ranks)
    head = Text(term_safe(title or tr.source, 200), style="bold")
    head.append(f"  ({tr.format}, rank{'s' if len(tr.ranks) > 1 else ''} {ranks})", style="dim")
    parts: list[RenderableType] = [head]
    if not analysis.devices:
        parts.append(Text("no GPU activity in this trace", style="yellow"))
    for d in analysis.devices:
        parts.append(Text(""))
        parts.append(device_table(d))
        parts.append(stream_lines(d))
        sm = sm_line(d)
        if sm is not None:
            parts.append(sm)
    parts.append(Text(""))
    steps = steps_table(analysis)
    if steps is not None:
        parts += [steps, Text("")]
    setup = setup_line(analysis)
    if setup is not None:
        parts += [setup, Text("")]
    gaps = gaps_table(analysis, top_gaps)
    if gaps is not None:
        parts += [gaps, Text("")]
    else:
        parts.append(Text(f"No idle gaps ≥ {fmt_ns(analysis.options.gap_threshold_ns)}.\n"))
    findings = findings_table(analysis.findings)
    parts += [findings, Text("")] if findings is not None else [Text("No findings.\n")]
    if analysis.notes:
        # a hanging indent: a wrapped note goes on under its own text, not at column 0
        notes = Table.grid()
        notes.add_column(no_wrap=True)
        notes.add_column()
        for n in analysis.notes:
            notes.add_row("  - ", Text(term_safe(n, 400), style="dim"))
        parts += [Text("Notes", style="bold"), notes]
    return parts


def format_analysis(
    analysis: Analysis, *, title: str | None = None, top_gaps: int = 10, width: int = 110
) -> str:
    """The human analysis as plain text (no colour): what `tracelab analyze` prints to a pipe."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False, soft_wrap=False)
    console.print(Group(*analysis_renderables(analysis, title=title, top_gaps=top_gaps)))
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip().splitlines()) + "\n"
