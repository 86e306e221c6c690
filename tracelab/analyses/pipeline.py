"""`analyze`: a Timeline in, one frozen `Analysis` out (devices, gaps, steps, findings, notes)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import msgspec

from tracelab.analyses.core.host import host_views
from tracelab.analyses.core.host_threads import FirstSeen, thread_first_seen
from tracelab.analyses.core.memo import using
from tracelab.analyses.core.rows import ranks_of
from tracelab.analyses.device.devices import device_rows, device_summaries
from tracelab.analyses.findings import finding_notes
from tracelab.analyses.gaps.idle import Classification
from tracelab.analyses.parallel import memory_first, run_each, threads_for
from tracelab.analyses.results import Analysis, AnalysisOptions, Finding, StepInfo, TraceInfo
from tracelab.analyses.rules import RULES, FindingContext, collect, rule_tasks
from tracelab.analyses.sm.lanes import sm_notes, sm_summary
from tracelab.analyses.steps.infer import Steps, find_steps
from tracelab.analyses.steps.table import step_rows
from tracelab.model import Flag, Timeline


def drop_orphans(timeline: Timeline) -> tuple[Timeline, int]:
    """The timeline without events flagged ORPHAN (GPU work whose correlation matches no host
    launch), and how many were dropped. TraceLens-compatible totals exclude them."""
    orphan = (timeline.col("flags") & Flag.ORPHAN) != 0
    n = int(orphan.sum())
    if n == 0:
        return timeline, 0
    keep = ~orphan
    return dataclasses.replace(timeline, cols={c: a[keep] for c, a in timeline.cols.items()}), n


DEFAULT_OPTIONS = AnalysisOptions()


def analyze_scoped(
    timeline: Timeline,
    options: AnalysisOptions = DEFAULT_OPTIONS,
    rule_options: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    steps: str | None = None,
    window_us: str | None = None,
) -> Analysis:
    """`analyze` restricted to `--steps A:B` or `--window START_US:END_US` (tracelab.analyses.scope):
    every figure covers that range; a note says what the figures cover (without a scope: how many steps
    and how much warm-up they include). BadInput for a bad or empty range."""
    with using(timeline):
        return _analyze_scoped(timeline, options, rule_options, steps, window_us)


def _analyze_scoped(
    timeline: Timeline,
    options: AnalysisOptions,
    rule_options: Mapping[str, Mapping[str, Any]] | None,
    steps: str | None,
    window_us: str | None,
) -> Analysis:
    from tracelab.analyses.scope import scope_timeline, whole_run_note

    if steps is None and window_us is None:  # the whole run: its steps are found with the other analyses
        return with_setup(timeline, analyze(timeline, options, rule_options, steps_note=whole_run_note), options, rule_options)
    first_seen = thread_first_seen(timeline)
    start = int(timeline.col("start").min()) if timeline.n_events else None  # offsets stay run-relative
    scoped, scoped_steps, note = scope_timeline(timeline, steps, window_us)
    return analyze(
        scoped, options, rule_options, steps=scoped_steps, scope_note=note, first_seen=first_seen, run_start=start
    )


def analyze(
    timeline: Timeline,
    options: AnalysisOptions = DEFAULT_OPTIONS,
    rule_options: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    steps: Steps | None = None,
    scope_note: str | None = None,
    first_seen: FirstSeen | None = None,
    run_start: int | None = None,
    steps_note: Callable[[Steps], str] | None = None,
) -> Analysis:
    """Per-device busy/idle/overlap, idle gaps with causes, steps, the per-step table and findings
    (DESIGN.md definitions). `rule_options` overrides rule thresholds by rule id; `steps` (default:
    find_steps), `scope_note`, `first_seen` (host threads' first activity in the unscoped trace) and
    `run_start` (the unscoped trace's first event) come from `analyze_scoped`; so does `steps_note`, a note
    made from the steps once they are found, placed where `scope_note` goes. The analyses share what
    they derive from the timeline through its active analysis context (one is made when none is)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(using(timeline))
        return _analyze(
            stack, timeline, options, rule_options, steps, scope_note, first_seen, run_start, steps_note
        )


def _analyze(
    stack: contextlib.ExitStack,
    timeline: Timeline,
    options: AnalysisOptions,
    rule_options: Mapping[str, Mapping[str, Any]] | None,
    steps: Steps | None,
    scope_note: str | None,
    first_seen: FirstSeen | None,
    run_start: int | None,
    steps_note: Callable[[Steps], str] | None,
) -> Analysis:
    notes = list(timeline.meta.notes)
    if scope_note:
        notes.append(scope_note)
    steps_note_at = len(notes)
    # analyze_scoped's steps (steps_note) are those of the whole trace, orphans included
    steps_of = timeline if steps_note is not None else None
    if run_start is None:
        run_start = int(timeline.col("start").min()) if timeline.n_events else None
    if options.exclude_orphans:
        timeline, dropped = drop_orphans(timeline)
        stack.enter_context(using(timeline))  # the analyses below share the orphan-free timeline's rows
        notes.append(
            f"excluded {dropped} GPU events whose correlation matches no host launch (TraceLens-compatible mode)"
        )
    rows = device_rows(timeline)
    if not rows:
        notes.append("no GPU activity (kernels, memcpys, memsets) in this trace")
    # on threads for a big timeline; memory first (the allocator's free memory given back after each task) on the biggest
    each = partial(run_each, threads=threads_for(timeline.n_events), release=memory_first(timeline.n_events))
    given_steps = steps

    def host_side() -> tuple[dict, Classification, tuple]:
        hosts = host_views(timeline, first_seen, options.input_words)
        classified = Classification(timeline, options.gap_threshold_ns, rows=rows, hosts=hosts)
        return hosts, classified, classified.gaps()

    def sm_time() -> None:  # memoized: device_summaries then finds it (or waits for it)
        for dr in rows:
            sm_summary(timeline, dr.rank, dr.device)

    # on one thread in this order (the steps' temporaries are gone before the rest, as the peak memory
    # of the biggest traces wants); on several, the SM time and the host side start first
    steps, _, devices, (hosts, classified, (gaps, gap_details)) = each(
        [
            lambda: given_steps if given_steps is not None else find_steps(steps_of or timeline),
            sm_time,
            lambda: device_summaries(timeline, rows),
            host_side,
        ],
        first=[False, True, False, True],
    )
    if steps_note is not None:
        notes.insert(steps_note_at, steps_note(steps))
    notes.extend(steps.notes)
    notes.extend(sm_notes(timeline))  # what the SM figures leave out or cannot know
    ctx = FindingContext(timeline, rows, hosts, devices, gaps, steps, idle_source=classified.idle)
    table, *outcomes = each(
        [lambda: step_rows(timeline, steps, gaps), *rule_tasks(ctx, rule_options)],
        first=[False, *(rule.long for rule in RULES)],
    )
    findings, skipped = collect(outcomes)
    notes.extend(finding_notes(skipped))
    meta = timeline.meta
    ranks = meta.ranks or ranks_of(timeline)
    return Analysis(
        trace=TraceInfo(source=meta.source, format=meta.format, ranks=tuple(ranks), start_ns=run_start),
        devices=devices,
        gaps=gaps,
        findings=findings,
        notes=tuple(notes),
        options=options,
        steps=tuple(
            StepInfo(rank=s.rank, index=s.index, start_ns=s.start_ns, end_ns=s.end_ns, source=s.source)
            for s in steps.steps
        ),
        step_rows=table,
        gap_details=gap_details,
    )


def with_setup(
    timeline: Timeline,
    an: Analysis,
    options: AnalysisOptions = DEFAULT_OPTIONS,
    rule_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> Analysis:
    """The analysis with its set-up (tracelab.analyses.steps.setup_phase) and every finding's scope."""
    from tracelab.analyses.scope import steps_span_timeline
    from tracelab.analyses.steps.infer import Step, Steps
    from tracelab.analyses.steps.setup_phase import is_material, rank_setups, scope_findings

    start = an.trace.start_ns if an.trace.start_ns is not None else 0
    setups = rank_setups(timeline, an.step_rows, an.gaps)
    spans: dict[int, int] = {}
    for d in an.devices:
        spans[d.rank] = max(spans.get(d.rank, 0), d.span_ns)

    def steps_only() -> tuple[Finding, ...]:
        steps = Steps(tuple(Step(s.rank, s.index, s.start_ns, s.end_ns, s.source) for s in an.steps))
        inner = steps_span_timeline(timeline, an.step_rows)
        return analyze(inner, options, rule_options, steps=steps, run_start=start).findings

    findings = scope_findings(an.findings, bool(an.steps), is_material(setups, spans), steps_only)
    return msgspec.structs.replace(an, setup=setups, findings=findings)

