"""The short "Ranks" section of `tracelab analyze` for multi-rank runs: one line per rank, the matched
collectives in a few words, and the stragglers. Plain text (every name here is a number or an NCCL
operation label, but labels still go through `term_safe`)."""

from __future__ import annotations

import textwrap
from collections import Counter

from tracelab.analyses.ranks.view import RankAnalysis
from tracelab.render.text.compare import term_safe
from tracelab.text_format import fmt_ns


def _wrap(text: str, indent: str = "  ", width: int = 100) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ") or [indent]


def _bytes(n: int) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def stragglers_text(ra: RankAnalysis, k: int) -> str:
    """The first k stragglers: how often each was last, how long the others waited, and the straggler's own
    main GPU idle cause (e.g. input_wait: starved by its loader)."""

    def why(rank: int) -> str:
        cause = ra.idle_cause(rank)
        return f"; its GPU idle mostly {cause[0]} {fmt_ns(cause[1])}" if cause else ""

    return ", ".join(
        f"rank {s.rank} last {s.times_last}× (others waited {fmt_ns(s.caused_wait_ns)}{why(s.rank)})"
        for s in ra.collectives.stragglers[:k]
    )


def format_ranks(ra: RankAnalysis, max_ranks: int = 32, width: int = 100) -> str:
    """The Ranks section as text ending in a newline, every line at most `width` characters, held between
    98 and 100 whatever the terminal ('' for a single-rank run): the rank table (98 columns), then the
    collectives and stragglers wrapped with a hanging indent (a wide terminal made 150-200 character
    lines of them, issue 28)."""
    if not ra.multi_rank:
        return ""
    width = min(max(width, 98), 100)
    over_steps = any(r.scope == "steps" for r in ra.ranks)
    # issue 24: the table covers each rank's steps on the GPU, set-up apart (as the Set-up line does)
    lines = ["Ranks (over the steps on the GPU; set-up and teardown apart)" if over_steps else "Ranks"]
    head = (f"{'rank':>4}  {'span':>9}  {'busy':>6}  {'idle: main cause':<33}  {'comm':>9}  {'comm∥comp':>9}  "
            f"{'coll. wait':>10}  {'last':>4}")
    lines.append(head)
    shown = sorted(ra.ranks, key=lambda r: (-r.collective_wait_ns, r.rank))[:max_ranks]
    for r in sorted(shown, key=lambda r: r.rank):
        causes = [(c, ns) for c, ns in r.idle_by_cause if ns > 0]
        main = max(causes, key=lambda x: x[1]) if causes else ("-", 0)
        idle = f"{fmt_ns(r.idle_ns)} ({main[0]} {_pct(main[1], r.idle_ns)})" if r.idle_ns else "0"
        lines.append(
            f"{r.rank:>4}  {fmt_ns(r.span_ns):>9}  {_pct(r.busy_ns, r.span_ns):>6}  {idle:<33}  "
            f"{fmt_ns(r.comm_ns):>9}  {fmt_ns(r.compute_comm_overlap_ns):>9}  "
            f"{fmt_ns(r.collective_wait_ns):>10}  {r.times_last:>4}"
        )
    if len(ra.ranks) > len(shown):
        lines.append(f"  ({len(ra.ranks) - len(shown)} more ranks with less collective wait not shown)")
    outside = [(r.rank, r.whole_collective_wait_ns - r.collective_wait_ns) for r in ra.ranks if r.scope == "steps"]
    outside = sorted((x for x in outside if x[1] > 0), key=lambda x: -x[1])
    if outside:
        each = ", ".join(f"rank {r} {fmt_ns(ns)}" for r, ns in outside[:4])
        more = f" (+{len(outside) - 4} ranks)" if len(outside) > 4 else ""
        lines += _wrap(f"outside the steps (set-up, teardown) ranks also waited in collectives: {each}{more}")
    wrap = lambda text: textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False)
    c = ra.collectives
    if c.calls:
        ops = Counter(x.name for x in c.calls)
        what = ", ".join(f"{term_safe(op, 40)} ×{n}" for op, n in ops.most_common())
        total_wait = sum(x.wait_ns for x in c.calls)
        worst = max(c.calls, key=lambda x: x.skew_ns)
        lines += wrap(
            f"Collectives matched across ranks: {len(c.calls)} ({what}); ranks waited {fmt_ns(total_wait)} "
            f"in them for the last arrival; worst skew {fmt_ns(worst.skew_ns)} "
            f"({term_safe(worst.name, 40)} #{worst.seq}, last rank {worst.last_rank})"
        )
        lines += wrap(f"Stragglers: {stragglers_text(ra, 3)}")
        for late in ra.straggler_causes[:1]:
            lines += _wrap(term_safe(late.sentence(fmt_ns), 300))
        sized = [x for x in c.calls if x.bytes is not None]
        if sized:
            by_op: dict[str, list] = {}
            for x in sized:
                by_op.setdefault(x.name, []).append(x)
            parts = []
            for op, xs in sorted(by_op.items(), key=lambda kv: -sum(x.bytes for x in kv[1])):
                bus = [x.busbw_gbps for x in xs if x.busbw_gbps is not None]
                med = f", busbw median {sorted(bus)[len(bus) // 2]:.1f} GB/s" if bus else ""
                parts.append(f"{term_safe(op, 40)} {_bytes(sum(x.bytes for x in xs))} in {len(xs)}{med}")
            lines += _wrap("Bytes moved: " + "; ".join(parts), indent="")
    if ra.step_comm:
        comm = sum(x.comm_ns for x in ra.step_comm)
        exposed = sum(x.exposed_comm_ns for x in ra.step_comm)
        wait = sum(x.wait_ns for x in ra.step_comm)
        lines += _wrap(
            f"Communication in steps (all ranks): {fmt_ns(comm)}, exposed (not overlapped with compute) "
            f"{fmt_ns(exposed)}, waiting for the last rank {fmt_ns(wait)}",
            indent="",
        )
    for n in c.notes:
        lines += textwrap.wrap(f"  - {term_safe(n, 300)}", width, subsequent_indent="    ")
    return "\n".join(lines) + "\n"
