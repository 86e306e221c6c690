"""The CI gate of `tracelab compare A B --fail-if-slower PCT`: is B's steady-state step time slower than
A's by more than PCT percent, with the steps' spread taken into account?

Test: a one-sided Mann-Whitney U test (Wilcoxon rank-sum) of H0 "B's step times are not larger than A's
scaled by (1 + PCT/100)" against H1 "they are stochastically larger": U counts the pairs (a, b) with
b > (1 + PCT/100) * a (ties count 1/2), z uses the normal approximation with the tie correction and a
continuity correction, and the gate fails when p < ALPHA (0.05) AND B's median exceeds the scaled median
of A. Rank-based: robust to the odd outlier step, and no normality assumed. Needs MIN_STEPS steady steps
per run; with fewer (or a run without steps) the gate compares the verdict's basis (GPU span) against the
threshold without a spread (said in `reason`). numpy only (no scipy).

Steady state = the analysis' steps without the warm-up ones (`StepRow.warmup`). The per-step durations
come through ONE function, `step_times_for_gate`, so that what is timed (wall step, GPU step) can change in
one place.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import msgspec
import numpy as np

from tracelab.analyses.results import Analysis

ALPHA = 0.05
MIN_STEPS = 3
EXIT_SLOWER = 3


def step_times_for_gate(analysis: Analysis) -> np.ndarray:
    """GPU step times (ns, float64) of the analysis' steady-state steps (issue 24): the steps after warm-up
    of the rank that sets the steady-state GPU step time (the slowest; analyses.step_time), the same basis
    as compare's verdict. Host durations where no step launched GPU work; empty without steps."""
    from tracelab.analyses.steps.steady import rank_gpu_times, steady_step_time

    steady = steady_step_time(analysis.step_rows)
    if steady is not None:
        return rank_gpu_times(analysis.step_rows, steady.rank).astype(np.float64)
    rows = [r for r in analysis.step_rows if not r.warmup]
    if rows:
        return np.array([r.duration_ns for r in rows], dtype=np.float64)
    if analysis.step_rows:  # every step is warm-up: nothing steady to time
        return np.zeros(0, dtype=np.float64)
    return np.array([s.end_ns - s.start_ns for s in analysis.steps], dtype=np.float64)


class MannWhitney(msgspec.Struct, frozen=True):
    u: float  # pairs with b > a (ties 1/2)
    z: float
    p_value: float  # one-sided: P(U >= u) under H0


def mann_whitney_greater(a: np.ndarray, b: np.ndarray) -> MannWhitney:
    """One-sided Mann-Whitney U of "b is stochastically larger than a" (normal approximation with tie and
    continuity corrections). Both non-empty."""
    n1, n2 = a.size, b.size
    values = np.concatenate([a, b])
    _uniq, inv, counts = np.unique(values, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # 0-based rank of each distinct value's first occurrence
    avg_rank = first + (counts + 1) / 2.0  # 1-based average rank of the tied block
    ranks = avg_rank[inv.reshape(-1)]
    u = float(ranks[n1:].sum() - n2 * (n2 + 1) / 2.0)
    n = n1 + n2
    mean = n1 * n2 / 2.0
    ties = float((counts**3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    z = (0.0 if u <= mean else math.inf) if var <= 0 else (u - mean - 0.5) / math.sqrt(var)
    p = 0.5 * math.erfc(z / math.sqrt(2.0))
    return MannWhitney(u=u, z=z, p_value=p)


class Gate(msgspec.Struct, frozen=True):
    threshold_pct: float
    basis: Literal["gpu_step", "step", "span"]
    test: str
    alpha: float
    a_n: int
    b_n: int
    a_median_ns: float
    b_median_ns: float
    median_pct: float | None  # B's median relative to A's, in percent (+: slower)
    u: float | None
    z: float | None
    p_value: float | None
    slower: bool  # the gate fails
    exit_code: int  # 3 when slower, else 0
    reason: str

    def to_dict(self) -> dict[str, Any]:
        d = msgspec.structs.asdict(self)
        if d["z"] is not None and not math.isfinite(d["z"]):
            d["z"] = None
        return d


def gate(a: Analysis, b: Analysis, threshold_pct: float, span_a_ns: int = 0, span_b_ns: int = 0,
         fallback: str = "span") -> Gate:
    """The gate decision for B against A (see the module doc). `span_*`: the verdict's figures (`fallback`
    says which: "step" = mean step time, "span" = GPU span) used when either run has fewer than MIN_STEPS
    steady steps."""
    ta, tb = step_times_for_gate(a), step_times_for_gate(b)
    f = 1.0 + threshold_pct / 100.0
    if ta.size >= MIN_STEPS and tb.size >= MIN_STEPS:
        ma, mb = float(np.median(ta)), float(np.median(tb))
        mw = mann_whitney_greater(ta * f, tb)
        slower = bool(mw.p_value < ALPHA and mb > ma * f)
        pct = 100.0 * (mb - ma) / ma if ma else None
        pct_text = "n/a" if pct is None else f"{pct:+.1f}%"
        reason = (f"B's median GPU step {mb / 1e6:.3f} ms vs A's {ma / 1e6:.3f} ms ({pct_text}); "
                  f"one-sided Mann-Whitney U of B > A x {f:.3f}: U={mw.u:.1f}, p={mw.p_value:.3g} "
                  f"({'<' if mw.p_value < ALPHA else '>='} {ALPHA}) over {ta.size} and {tb.size} steady steps")
        from tracelab.analyses.steps.steady import steady_step_time

        on_gpu = steady_step_time(a.step_rows) is not None and steady_step_time(b.step_rows) is not None
        return Gate(threshold_pct, "gpu_step" if on_gpu else "step", "mann_whitney_u_one_sided", ALPHA, int(ta.size),
                    int(tb.size), ma, mb, pct, mw.u, mw.z, mw.p_value, slower, EXIT_SLOWER if slower else 0, reason)
    sa, sb = float(span_a_ns), float(span_b_ns)
    slower = bool(sa > 0 and sb > sa * f)
    pct = 100.0 * (sb - sa) / sa if sa else None
    what = "mean step time" if fallback == "step" else "GPU span"
    reason = (
        f"fewer than {MIN_STEPS} steady steps in a run ({ta.size} and {tb.size}): the verdict's {what} compared "
        f"without a spread, B {sb / 1e6:.3f} ms vs A {sa / 1e6:.3f} ms"
    )
    return Gate(threshold_pct, "span", "threshold_only", ALPHA, int(ta.size), int(tb.size), sa, sb, pct, None,
                None, None, slower, EXIT_SLOWER if slower else 0, reason)
