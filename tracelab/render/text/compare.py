"""`tracelab compare A B`: the comparison as terminal text (`format_comparison`); its JSON document is
tracelab.render.export.comparison. Also the small number formatters the report writers share."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable

from tracelab.analyses.comparison import Comparison, Delta, DeviceComparison, GapCauseDelta, Verdict
from tracelab.analyses.results import TraceInfo
from tracelab.render.text.comm import explain_comm_overlap
from tracelab.render.text.green import green_context_message
from tracelab.text_format import (
    fmt_count,
    fmt_fraction,
    fmt_ns,
    fmt_pct,
    fmt_points,
    fmt_ranks,
    fmt_ratio,
    fmt_signed_count,
    fmt_signed_ns,
)

# ---- shared formatting ------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def shorten(text: str, limit: int | None) -> str:
    """Cut long text in the middle ('void gemm<…, 128, 64>'): C++ kernel names and paths differ at
    their ends as often as at their starts."""
    if limit is None or len(text) <= limit:
        return text
    if limit < 8:
        return text[: max(limit - 1, 0)] + "…"
    head = (limit - 1) * 3 // 5
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def shorten_distinct(texts: list[str], limit: int) -> list[str]:
    """`shorten` each text, but never giving two different texts the same label: where middle cuts
    collide (kernel names that differ only in their middle), those labels show the start, then the part
    where the text differs from the others ('sm80_xmma_…_tn_n_tilesize128x128…'), and if that is still
    not enough a ' #2' suffix."""
    out = [shorten(t, limit) for t in texts]
    if limit < 12:
        return out
    groups: dict[str, list[int]] = {}
    for i, label in enumerate(out):
        groups.setdefault(label, []).append(i)
    for idx in groups.values():
        if len({texts[i] for i in idx}) < 2:
            continue
        for i in idx:
            t = texts[i]
            others = [texts[j] for j in idx if texts[j] != t]
            # the first character where t differs from each other text: show from the earliest such
            p = min(next((k for k, (x, y) in enumerate(zip(t, o)) if x != y), min(len(t), len(o))) for o in others)
            head = max(limit // 4, 4)
            if p <= head + 4:
                out[i] = shorten(t, limit)
                continue
            start = max(p - 4, head)
            room = limit - head - 1
            window = t[start:start + room]
            if start + room < len(t):
                window = window[:-1] + "…"
            out[i] = t[:head] + "…" + window
    seen: dict[str, int] = {}
    for i, label in enumerate(out):  # what is still shared gets a number (the first keeps its label)
        if label in seen and texts[seen[label]] != texts[i]:
            k = 2
            while (alt := shorten(label, limit - len(f" #{k}")) + f" #{k}") in seen:
                k += 1
            out[i] = alt
            label = alt
        seen.setdefault(label, i)
    return out


def term_safe(text: object, limit: int | None = None) -> str:
    """Untrusted text (kernel names, file names) made safe for a terminal: control characters
    (ANSI escapes, newlines, bidi overrides) become '?', long text is cut in the middle."""
    return shorten(_CONTROL.sub("?", str(text)), limit)


def device_label(d: DeviceComparison) -> str:
    if d.rank < 0:
        return "total"
    own = f"r{d.rank}/d{d.device}"
    if d.present == "both" and (d.b_rank, d.b_device) != (d.rank, d.device):
        own += f" ~ r{d.b_rank}/d{d.b_device}"
    return own


# ---- terminal text ---------------------------------------------------------------------------------


def _table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    right = right if right is not None else set(range(1, len(header)))
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


_ROWS = (
    ("span", "span_ns"),
    ("busy", "busy_ns"),
    ("idle", "idle_ns"),
    ("kernels", "kernel_ns"),
    ("memcpy", "memcpy_ns"),
    ("memset", "memset_ns"),
    ("comm", "comm_ns"),
    ("overlap compute/compute", "compute_compute_ns"),
    ("overlap compute/copy", "compute_copy_ns"),
    ("overlap compute/comm", "compute_comm_ns"),
    ("overlap copy/copy", "copy_copy_ns"),
    ("gap time", "gap_ns"),
)


def device_rows(d: DeviceComparison) -> list[list[str]]:
    """[figure, A, B, delta, %] rows of one device comparison (time figures, then counts)."""
    rows = [
        [label, fmt_ns(getattr(d, f).a), fmt_ns(getattr(d, f).b), fmt_signed_ns(getattr(d, f).delta), fmt_pct(getattr(d, f).pct)]
        for label, f in _ROWS
    ]
    rows.append(["busy fraction", fmt_fraction(d.busy_fraction_a), fmt_fraction(d.busy_fraction_b),
                 fmt_points(d.busy_fraction_b - d.busy_fraction_a), ""])
    if d.sm_source_a != "none" or d.sm_source_b != "none":
        rows.append([f"SM busy ({d.sm_source_a} / {d.sm_source_b})", fmt_fraction(d.sm_busy_a),
                     fmt_fraction(d.sm_busy_b), fmt_points(d.sm_busy_b - d.sm_busy_a), ""])
    for label, f in (("gaps", "gaps"), ("kernel launches", "kernels"), ("memcpys", "memcpys")):
        v: Delta = getattr(d, f)
        rows.append([label, fmt_count(v.a), fmt_count(v.b), fmt_signed_count(v.delta), fmt_pct(v.pct)])
    return rows


# ---- rows shared by the terminal, Markdown and HTML renderings --------------------------------------
# Each takes the cell formatters of its output (escaping, code spans); numbers are formatted here.


def _plain(text: str) -> str:
    return text


def compared_devices(c: Comparison) -> list[DeviceComparison]:
    """The devices to show, plus the totals row when more than one device is matched."""
    devices = list(c.devices)
    if c.totals is not None and sum(d.present == "both" for d in devices) > 1:
        devices.append(c.totals)
    return devices


def gap_rows(c: Comparison, cause: Callable[[str], str] = _plain) -> list[list[str]]:
    """[cause, count A, count B, time A, time B, delta, %] of the causes present in A or B."""
    return [
        [cause(g.cause), str(g.count.a), str(g.count.b), fmt_ns(g.total_ns.a), fmt_ns(g.total_ns.b),
         fmt_signed_ns(g.total_ns.delta), fmt_pct(g.total_ns.pct)]
        for g in c.gaps
        if g.count.a or g.count.b
    ]


def finding_rows(
    c: Comparison,
    rule: Callable[[str], str] = _plain,
    status: Callable[[str], str] = _plain,
    severity: Callable[[str], str] = _plain,
) -> list[list[str]]:
    """[rule, status, severity A, severity B, count A, count B, wasted A, wasted B] per rule."""
    return [
        [rule(f.rule), status(f.status), severity(f.severity_a or "-"), severity(f.severity_b or "-"),
         str(f.count.a), str(f.count.b), fmt_ns(f.wasted_ns.a), fmt_ns(f.wasted_ns.b)]
        for f in c.findings
    ]


def kernel_rows(c: Comparison, name: Callable[[str], str]) -> list[list[str]]:
    """[kernel, calls A, calls B, total A, total B, delta, %]; `name` gets the raw (maybe empty) name."""
    return [
        [name(k.name), str(k.calls.a), str(k.calls.b), fmt_ns(k.total_ns.a), fmt_ns(k.total_ns.b),
         fmt_signed_ns(k.total_ns.delta), fmt_pct(k.total_ns.pct)]
        for k in c.kernels
    ]


def green_context_title(c: Comparison) -> str:
    """'B (green_ctx) against A (sequential)': which side is the green-context run (raw text)."""
    g, run = c.green_contexts, c.green_contexts_run
    if g is None or run is None:
        return ""
    other = "a" if run == "b" else "b"
    return f"{run.upper()} ({g.variant}) against {other.upper()} ({g.baseline})"


def green_context_rows(c: Comparison) -> list[list[str]]:
    """[figure, A, B, B / A] of the green-context explanation (none without one). The partition rows
    have a value only on the green-context run's side."""
    g, run = c.green_contexts, c.green_contexts_run
    if g is None or run is None:
        return []

    def row(label: str, green: float, base: float, fmt: Callable[[float], str]) -> list[str]:
        a, b = (base, green) if run == "b" else (green, base)
        return [label, fmt(a), fmt(b), fmt_ratio(a, b)]

    def only_green(label: str, value: str) -> list[str]:
        return [label, "-", value, ""] if run == "b" else [label, value, "-", ""]

    rows = [
        row("span", g.variant_span_ns, g.sequential_span_ns, fmt_ns),
        row("matmul time", g.matmul_ns_variant, g.matmul_ns_sequential, fmt_ns),
        row("matmul SMs", g.matmul_sms_variant, g.matmul_sms_sequential, lambda x: str(int(x)) if x else "?"),
    ]
    if g.matmul_waves_variant and g.matmul_waves_sequential:
        rows.append(row("matmul waves per launch", g.matmul_waves_variant, g.matmul_waves_sequential,
                        lambda x: str(int(x))))
    if g.elementwise_ns_sequential:
        rows.append(row("elementwise time", g.elementwise_ns_variant, g.elementwise_ns_sequential, fmt_ns))
    parts = [("small", g.small_green_context, g.small_sm_count, g.small_busy_fraction, g.small_idle_sm_ns)]
    if g.large_green_context != g.small_green_context:
        parts.append(("large", g.large_green_context, g.large_sm_count, g.large_busy_fraction, g.large_idle_sm_ns))
    for label, gc, sms, busy, idle in parts:
        if gc is None:
            continue
        pace = " (sets the pace)" if gc == g.starving_green_context else ""
        rows.append(only_green(f"{label} partition {gc}: {sms} SMs, busy{pace}", fmt_fraction(busy)))
        rows.append(only_green(f"{label} partition {gc}: idle SM-time", f"{idle / 1e6:,.1f} SM-ms"))
    return rows


TERMINAL_WIDTH = 100


def side_label(info: TraceInfo) -> str:
    """A run's default label: the trace's file or directory name (callers with a store pass run names)."""
    source = info.source.rstrip("/\\")
    return source.replace("\\", "/").rsplit("/", 1)[-1] or source or "trace"


def _speed_words(v: Verdict) -> str:
    per = "per step" if v.basis in ("gpu_step", "step") else "in GPU span"  # the detail line says which
    pct = v.pct
    if pct is None:
        return f"B takes {fmt_ns(v.b_ns)} {per}"
    if abs(pct) < 0.05:
        return f"B takes the same time {per}"
    return f"B is {abs(pct):.1f}% {'slower' if pct > 0 else 'faster'} {per}"


def _causes_clause(causes: list[GapCauseDelta]) -> str:
    return "causes: " + ", ".join(f"{g.cause} {fmt_signed_ns(g.total_ns.delta)}" for g in causes)


def verdict_line(v: Verdict, width: int | None = TERMINAL_WIDTH) -> str:
    """'B is 15.8% slower per step; GPU idle +11.22 ms; causes: launch_latency +18.79 ms, ...'.
    With a width, the causes that do not fit are left out (the first one stays)."""
    head = [_speed_words(v), f"GPU idle {fmt_signed_ns(v.idle_ns.delta)}"]
    causes = list(v.causes)
    while width is not None and len(causes) > 1 and len("; ".join([*head, _causes_clause(causes)])) > width:
        causes.pop()
    return "; ".join(head + ([_causes_clause(causes)] if causes else []))


def verdict_detail(v: Verdict) -> str:
    """The figures behind the verdict: both times, GPU idle share, findings that came or went."""
    if v.basis == "gpu_step":
        parts = [
            (
                f"GPU step {fmt_ns(v.a_ns)} -> {fmt_ns(v.b_ns)} (steady state: median after warm-up, slowest "
                f"rank; {v.steps_a} and {v.steps_b} steps)"
            )
        ]
    elif v.basis == "step":
        parts = [f"per step {fmt_ns(v.a_ns)} -> {fmt_ns(v.b_ns)} (mean of {v.steps_a} and {v.steps_b} steps)"]
    else:
        parts = [f"GPU span {fmt_ns(v.a_ns)} -> {fmt_ns(v.b_ns)} (no steps marked in both runs)"]
    parts.append(f"GPU idle {fmt_fraction(v.idle_fraction_a)} -> {fmt_fraction(v.idle_fraction_b)} of span")
    if v.new_findings:
        parts.append("new findings: " + ", ".join(v.new_findings))
    if v.gone_findings:
        parts.append("gone: " + ", ".join(v.gone_findings))
    parts += [f"warning: {w}" for w in v.warnings]
    if v.caveats:
        parts.append("caution: " + "; ".join(v.caveats))
    return "; ".join(parts)


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=True) or [""]


def _fit_name_width(rows: list[list[str]], header: list[str], width: int) -> int:
    """Room left for the first column (kernel names) when every other column keeps its width."""
    others = sum(max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(1, len(header)))
    return max(width - others - 2 * (len(header) - 1), 12)


def format_comparison(
    comparison: Comparison,
    *,
    labels: tuple[str, str] | None = None,
    width: int = TERMINAL_WIDTH,
    name_width: int | None = None,
) -> str:
    """The comparison for the terminal, every line at most `width` characters: the verdict, then per
    device, gaps by cause, findings, top kernels. `labels` name A and B (run names; default: the
    trace file names)."""
    c = comparison
    la, lb = labels or (side_label(c.a), side_label(c.b))
    out: list[str] = []
    if c.verdict is not None:
        out.append(term_safe(verdict_line(c.verdict, width), width))
        out += _wrap(term_safe(verdict_detail(c.verdict)), width, "  ")
    out += [
        term_safe(f"A (baseline): {term_safe(la)}  [{c.a.format}, {fmt_ranks(c.a.ranks)}]", width),
        term_safe(f"B (variant):  {term_safe(lb)}  [{c.b.format}, {fmt_ranks(c.b.ranks)}]", width),
        "deltas are B - A; percentages relative to A",
    ]
    for n in c.notes:
        out += _wrap(f"note: {term_safe(n)}", width, "      ")
    for d in compared_devices(c):
        names = term_safe(d.name_a or d.name_b or "unknown GPU", 40)
        if d.present == "both" and d.name_a != d.name_b and d.rank >= 0:
            names = f"{term_safe(d.name_a, 30)} vs {term_safe(d.name_b, 30)}"
        present = {"both": "", "a": "  (only in A)", "b": "  (only in B)"}[d.present]
        header = f"== device {device_label(d)}  {names}{present}" if d.rank >= 0 else "== all matched devices (sums)"
        out += ["", term_safe(header, width)]
        out += _table(["", "A", "B", "delta", "%"], device_rows(d))
    if c.green_contexts is not None:
        out += ["", term_safe(f"== green contexts: {green_context_title(c)}", width)]
        out += _wrap(term_safe(green_context_message(c.green_contexts)), width)
        out += _table(["", "A", "B", "B / A"], green_context_rows(c))
    if c.comm_overlap is not None:
        out += ["", "== compute / communication (B against A)"]
        out += _wrap(term_safe(explain_comm_overlap(c.comm_overlap)), width)
    out += ["", "== gaps by cause"]
    out += _table(
        ["cause", "count A", "count B", "time A", "time B", "delta", "%"],
        gap_rows(c)
        or [["(no gaps)", "0", "0", "-", "-", "0", ""]],
    )
    w = c.wasted_ns
    out += [""] + _wrap(
        f"== findings: {c.new_findings} new, {c.gone_findings} gone, {c.changed_findings} changed; "
        f"wasted time {fmt_ns(w.a)} -> {fmt_ns(w.b)} ({fmt_pct(w.pct)})",
        width,
        "   ",
    )
    if c.findings:
        out += _table(
            ["rule", "status", "sev A", "sev B", "count A", "count B", "wasted A", "wasted B"],
            finding_rows(c, rule=lambda r: term_safe(r, 30)),
            right={4, 5, 6, 7},
        )
        for f in c.findings:
            if f.status == "new":
                out += _wrap(f"new {term_safe(f.rule, 30)}: {term_safe(f.message_b, 300)}", width, "    ")
    if c.kernels_compared:
        header = ["kernel", "calls A", "calls B", "total A", "total B", "delta", "%"]
        rows = kernel_rows(c, lambda n: n or "(unnamed)")
        limit = name_width or _fit_name_width(rows, header, width)
        # names that differ only in their middle stay told apart (a middle cut alone made identical rows)
        for r, label in zip(rows, shorten_distinct([_CONTROL.sub("?", r[0]) for r in rows], limit)):
            r[0] = label
        out += ["", "== top kernels by total time"]
        out += _table(header, rows or [["(no kernels)", "0", "0", "-", "-", "0", ""]])
    return "\n".join(out)
