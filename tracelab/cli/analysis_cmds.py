"""Analysis commands: analyze, compare, report, export. Each holds one `api.AnalysisContext` per
timeline it analyses, so the parts of its output share what the analyses derive from the timeline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import api
from ..errors import BadInput
from .common import (
    _db_option,
    _db_path,
    _echo_json,
    _gap_option,
    _orphan_option,
    _print_analysis,
    _safe,
    _scope_options,
    _stdout_bytes,
    err,
    load_named_subject,
    load_subject,
    terminal_width,
)
from .group import main

if TYPE_CHECKING:
    from ..api.types import Analysis, AnalysisContext, AnalysisOptions, RankAnalysis, Timeline


def _analyzed(
    timeline: Timeline, options: AnalysisOptions, steps: str | None = None, window: str | None = None
) -> tuple[Analysis, Timeline, AnalysisContext]:
    """The analysis of `timeline` (restricted to --steps / --window), the analysed range's timeline and
    the analysis context of that range (what the command's other parts are computed with)."""
    context = api.AnalysisContext(timeline)
    if steps is None and window is None:  # the whole timeline is the analysed range: its ranges can start now
        api.start_extras(timeline, context)
    analysis = api.analyze(timeline, options, steps=steps, window_us=window, context=context)
    scoped = api.scoped_timeline(timeline, steps, window)
    return analysis, scoped, context if scoped is timeline else api.AnalysisContext(scoped)


def _output_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """-o/--output FILE (required; the path is checked by check_output_path: one line)."""
    return click.option("-o", "--output", "output", required=True, type=click.Path(path_type=Path), help=help)


@main.command()
@click.argument("run_or_path")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis document (schema 2, docs/DESIGN.md).")
@_gap_option
@_orphan_option
@_scope_options
@click.option(
    "--input-word",
    "input_words",
    multiple=True,
    help="A word that marks a user range as data loading (gap cause input_wait); repeat it; replaces the "
    "default data, batch, load.",
)
@click.option(
    "--top",
    "top_gaps",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Gaps listed in the human output.",
)
@click.option("--ranges", "all_ranges", is_flag=True, help="List every range of the GPU-time-by-range table (default: top 10).")
@_db_option
@click.pass_context
def analyze(
    ctx: click.Context,
    run_or_path: str,
    as_json: bool,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
    top_gaps: int,
    steps: str | None,
    window: str | None,
    input_words: tuple[str, ...] = (),
    all_ranges: bool = False,
) -> None:
    """Analyse a run (id, id prefix or name) or a trace file (parsed directly, not stored):
    busy/idle per device, overlap, idle gaps with their causes, steps, findings."""
    api.check_scope(steps, window)
    timeline, title = load_subject(ctx, run_or_path)
    options = api.options(gap_threshold_us, exclude_orphans, input_words)
    analysis, scoped, context = _analyzed(timeline, options, steps, window)
    ranks = None
    if len(analysis.trace.ranks) > 1:  # cross-rank part (tracelab/analyses/ranks/view.py), same range
        ranks = api.rank_analysis(scoped, analysis, context)
    if as_json:
        from tracelab.render.export.document import write_document

        out = _stdout_bytes()
        write_document(analysis, out.write, api.document_extras(scoped, analysis, ranks, context))
        out.flush()
    else:
        _print_analysis_text(analysis, title, scoped, context, ranks, top_gaps, all_ranges)


def _print_analysis_text(
    analysis: Analysis,
    title: str,
    scoped: Timeline,
    context: AnalysisContext,
    ranks: RankAnalysis | None,
    top_gaps: int,
    all_ranges: bool,
) -> None:
    """`analyze` for people: trace health, the analysis, workload figures, GPU time by range, GPU memory,
    the cross-rank part and the critical path of each step (issue 24)."""
    from tracelab.render.text.health import health_lines

    health = api.health(scoped, analysis, context)
    projection = api.ranges(scoped, analysis, context)
    cpath = api.critical_path(scoped, analysis, ranks, context)

    click.echo("\n".join(health_lines(health, terminal_width())) + "\n")
    _print_analysis(analysis, title, top_gaps)
    from tracelab.render.text.workload import workload_lines

    lines = workload_lines(scoped)
    if lines:
        click.echo("\nWorkload figures")
        click.echo("\n".join(_safe(x) for x in lines))
    from tracelab.render.text.ranges import ranges_lines

    range_table = ranges_lines(projection, None if all_ranges else 10, terminal_width())
    if range_table:
        click.echo("\n" + "\n".join(range_table))
    mem = api.memory(scoped, analysis, context)
    if mem is not None:
        from tracelab.render.text.memory import memory_lines

        click.echo("\n" + "\n".join(memory_lines(mem, analysis.trace.start_ns, terminal_width())))
    if ranks:
        from tracelab.render.text.ranks import format_ranks

        click.echo(format_ranks(ranks, width=terminal_width()), nl=False)
    from tracelab.render.text.critical_path import format_critical_path

    click.echo(format_critical_path(cpath), nl=False)


@main.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print both analyses and the comparison as JSON.")
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="CI gate: exit 3 when B's steady-state step time is slower than A's by more than PCT %% "
    "(one-sided Mann-Whitney U on the per-step times, p < 0.05), else 0.",
)
@_gap_option
@_orphan_option
@_scope_options
@_db_option
@click.pass_context
def compare(
    ctx: click.Context,
    a: str,
    b: str,
    as_json: bool,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
    steps: str | None,
    window: str | None,
    fail_pct: float | None = None,
) -> None:
    """Compare run/trace B (variant) against A (baseline): deltas of span, busy, idle, overlap,
    gaps by cause, findings and top kernels."""
    api.check_scope(steps, window)
    options = api.options(gap_threshold_us, exclude_orphans)
    tl_a, _, label_a = load_named_subject(ctx, a)
    tl_b, _, label_b = load_named_subject(ctx, b)
    an_a, scoped_a, _ = _analyzed(tl_a, options, steps, window)
    an_b, scoped_b, _ = _analyzed(tl_b, options, steps, window)
    comparison = api.compare(an_a, an_b, scoped_a, scoped_b)
    decision = api.gate(an_a, an_b, fail_pct, comparison) if fail_pct is not None else None
    if as_json:
        _echo_json(api.comparison_json(an_a, an_b, comparison, decision))
    else:
        from tracelab.render.text.compare import format_comparison

        click.echo(format_comparison(comparison, labels=(label_a, label_b), width=terminal_width()))
        if decision is not None:
            verdict = "FAIL (B is slower)" if decision.slower else "pass"
            click.echo(f"\nGate --fail-if-slower {fail_pct:g}%: {verdict}: {_safe(decision.reason)}")
    if decision is not None and decision.slower:
        ctx.exit(decision.exit_code)


@main.command()
@click.argument("run_or_path")
@_output_option("Report file: .html (self-contained), .md or .json.")
@click.option("--against", help="Baseline run or trace to compare with.")
@_gap_option
@_orphan_option
@_scope_options
@_db_option
@click.pass_context
def report(
    ctx: click.Context,
    run_or_path: str,
    output: Path,
    against: str | None,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
    steps: str | None,
    window: str | None,
) -> None:
    """Write a report of a run or trace: .html (works offline), .md or .json, by extension."""
    if output.suffix.lower() not in (".html", ".htm", ".md", ".json"):
        raise BadInput("unknown report format (use a .html, .md or .json file name)", output)
    from tracelab.render.reports.write import check_output_path

    check_output_path(output, (run_or_path, against, _db_path(ctx)))  # before any parsing or analysis

    api.check_scope(steps, window)
    options = api.options(gap_threshold_us, exclude_orphans)
    timeline, _ = load_subject(ctx, run_or_path)
    analysis, scoped, context = _analyzed(timeline, options, steps, window)
    base = None
    if against:
        tl_b, _ = load_subject(ctx, against)
        base_analysis, base_scoped, _ = _analyzed(tl_b, options, steps, window)
        base = (base_analysis, base_scoped)
    api.report(output, analysis, scoped, against=base, context=context)
    click.echo(str(output))


@main.command()
@click.argument("run_or_path")
@_output_option("Trace-event JSON file, e.g. run.perfetto.json (opens in Perfetto and chrome://tracing).")
@click.option(
    "--sm-lanes/--no-sm-lanes",
    default=False,
    help="Add one lane per SM (measured / estimated); off by default: they are most of a big export.",
)
@_gap_option
@_orphan_option
@_db_option
@click.pass_context
def export(
    ctx: click.Context,
    run_or_path: str,
    output: Path,
    sm_lanes: bool,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
) -> None:
    """Export a run or trace for Perfetto / chrome://tracing (Chrome trace-event JSON), with
    tracelab's idle gaps and their causes, findings, steps (and with --sm-lanes per-SM lanes) as extra
    tracks."""
    if output.suffix.lower() != ".json":
        raise BadInput("the export is JSON: use a .json file name (e.g. run.perfetto.json)", output)
    from tracelab.render.export.perfetto import write_perfetto
    from tracelab.render.reports.write import check_output_path

    check_output_path(output, (run_or_path, _db_path(ctx)))  # before any parsing or analysis
    timeline, _ = load_subject(ctx, run_or_path)
    context = api.AnalysisContext(timeline)
    analysis = api.analyze(timeline, api.options(gap_threshold_us, exclude_orphans), context=context)
    with context.active():  # the export's SM lanes and steps share what the analysis derived
        summary = write_perfetto(output, timeline, analysis, sm_lanes=sm_lanes)
    for note in summary.notes:
        err(f"note: {_safe(note)}")
    err(f"{_safe(output.name, 40)}: {summary.events:,} events on {len(summary.tracks)} tracks "
        "(open it in ui.perfetto.dev or chrome://tracing)")
    click.echo(str(output))


