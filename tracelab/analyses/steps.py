"""Training steps (iterations) of a Timeline, per rank: marked when the trace has markers, else
inferred from the repeating structure of the launch sequence. docs/DESIGN.md ("Steps") documents
the method and its failure modes.

Marked: host ranges named `ProfilerStep#N` (torch.profiler schedule), or else NVTX /
record_function ranges named like a step (`step 3`, `train_step`, `iteration 12`; top-level ones
only). `source="marked"`.

Inferred (no markers on the rank): the rank's launch sequence is the host API calls that launch GPU
work or block on it, in time order, each as a token: the name of the GPU op it launched (the kernel
name, `Memcpy HtoD` ...) or the API name of a blocking call. A training loop repeats the same tokens
every step, so
1. the period P is the smallest lag at which the sequence nearly matches itself one lag later
   (match fraction within a small margin of the best lag's): candidate lags come from an FFT
   autocorrelation of the tokens mapped to random unit phases (every lag at once, O(n log n)), their
   exact match fractions are then counted on one common window;
2. the anchor is a token that occurs once per period, in rhythm (successive occurrences P tokens
   apart): preferably a blocking call (the step ends when it returns, e.g. `loss.item()`'s
   cudaStreamSynchronize), else the token after the longest recurring host pause (the step starts
   at its call, e.g. the first kernel of the forward pass);
3. every in-rhythm occurrence of the anchor is a step boundary. Steps are contiguous host-time
   intervals; the first step of an end-anchored sequence starts at the token pair that steadily
   follows the anchor (so the warm-up step, however different, is one step), set-up before it is no
   step.
A token period under SHORT_BLOCK launches is a block repeated inside the step: the step is then the
multiple of it at which the host pauses much longer than usual (pause_period / cut_by_pause).
`source="inferred"`. Where no steps are found, `Steps.notes` says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..model import GPU_ACTIVITY_KINDS, EventKind, Flag, Timeline

StepSource = Literal["marked", "inferred"]

PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
STEP_LIKE = re.compile(
    r"^\s*(train(ing)?[\s_-]?)?(step|iter|iteration)(\s*[#_:-]?\s*\d+)?\s*$", re.IGNORECASE
)

# ---- inference thresholds ----------------------------------------------------------------------
MIN_REPEATS = 3  # a period must repeat at least this often in the sequence
MIN_PERIOD = 2  # tokens per step; a period of 1 means "one operation over and over": no steps
MIN_MATCH = 0.6  # fraction of positions equal one period later
MISMATCH_SLACK = 1.5  # the period's mismatch may be this many times the best lag's ...
MISMATCH_MARGIN = 0.1  # ... plus this (an inserted launch costs a period of matches)
MAX_TOKENS = 200_000  # the period is found on the first tokens (the steps are cut on all of them)
EMBED_DIMS = 4  # random phases per token for the FFT estimate
SHORTLIST = 32  # lags with the best estimates whose exact match is counted
MAX_DIVISOR = 64  # the best lags' fractions L/k (k ≤ this) are checked too
ANCHOR_RHYTHM = 0.8  # an anchor's successive occurrences are P apart this often


@dataclass(frozen=True)
class Step:
    rank: int
    index: int  # 0-based, per rank, in time order
    start_ns: int
    end_ns: int
    source: StepSource


@dataclass(frozen=True)
class Steps:
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    def of_rank(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of a rank's steps, int64, sorted by start."""
        mine = [s for s in self.steps if s.rank == rank]
        starts = np.array([s.start_ns for s in mine], dtype=np.int64)
        ends = np.array([s.end_ns for s in mine], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        return starts[order], ends[order]

    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({s.rank for s in self.steps}))

    def __len__(self) -> int:
        return len(self.steps)


def _ranks(timeline: Timeline) -> list[int]:
    return [int(r) for r in np.unique(timeline.events["rank"].to_numpy())]


def _ids(strings: tuple[str, ...], pattern: re.Pattern[str]) -> np.ndarray:
    return np.fromiter((i for i, s in enumerate(strings) if pattern.search(s)), dtype=np.int64)


# ---- marked ----------------------------------------------------------------------------------
def marked_steps(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-level marked steps of a rank: (start, end) sorted by start; empty when none."""
    ev = timeline.events
    kind = ev["kind"].to_numpy()
    host_range = np.isin(kind, [int(EventKind.CPU_OP), int(EventKind.NVTX_RANGE)]) & (
        ev["rank"].to_numpy() == rank
    )
    names = ev["name"].to_numpy()
    for pattern in (PROFILER_STEP, STEP_LIKE):
        ids = _ids(timeline.strings, pattern)
        if ids.size == 0:
            continue
        pos = np.flatnonzero(host_range & np.isin(names, ids))
        if pos.size == 0:
            continue
        s = ev["start"].to_numpy()[pos]
        e = ev["end"].to_numpy()[pos]
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        # keep top-level ranges only (drop those inside an earlier one)
        prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
        top = (e > prev_max) & (e > s)
        return s[top].astype(np.int64), e[top].astype(np.int64)
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty


# ---- the launch sequence -----------------------------------------------------------------------
@dataclass(frozen=True)
class LaunchSequence:
    """Tokens (string ids) with the host (or GPU) time of each, in time order."""

    tokens: np.ndarray  # int64 string ids
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    blocking: np.ndarray  # bool: the call blocks the host until GPU work is done
    where: str  # "threads 513, 565" / "GPU ops"


def launch_sequences(timeline: Timeline, rank: int) -> list[LaunchSequence]:
    """The sequences to look for a period in, most promising first: all launching threads of the
    rank merged in time order (PyTorch launches the backward pass from its autograd thread), then
    each launching thread alone (most launches first); the rank's GPU ops in start order when the
    trace has no host API calls."""
    ev = timeline.events
    kind = ev["kind"].to_numpy()
    on_rank = ev["rank"].to_numpy() == rank
    flags = ev["flags"].to_numpy()
    names = ev["name"].to_numpy().astype(np.int64)
    start = ev["start"].to_numpy()
    end = ev["end"].to_numpy()
    tid = ev["tid"].to_numpy()
    corr = ev["correlation"].to_numpy()
    api = np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER)]) & on_rank
    rows = np.flatnonzero(api & ((flags & (Flag.LAUNCH | Flag.BLOCKING)) != 0))
    if rows.size == 0:
        gpu = np.flatnonzero(on_rank & np.isin(kind, [int(k) for k in GPU_ACTIVITY_KINDS]))
        if gpu.size == 0:
            return []
        return [LaunchSequence(names[gpu], start[gpu], end[gpu], np.zeros(gpu.size, dtype=bool), "GPU ops")]
    # token of a launch: the name of the GPU op it issued (by correlation id), else its own name
    gpu = np.flatnonzero(on_rank & np.isin(kind, [int(k) for k in GPU_ACTIVITY_KINDS]) & (corr >= 0))
    g_corr = corr[gpu]
    order = np.argsort(g_corr, kind="stable")
    g_corr, g_name = g_corr[order], names[gpu][order]
    tokens = names[rows].copy()
    blocking = (flags[rows] & Flag.BLOCKING) != 0
    if g_corr.size:
        j = np.searchsorted(g_corr, corr[rows])
        jc = np.minimum(j, g_corr.size - 1)
        hit = (j < g_corr.size) & (g_corr[jc] == corr[rows]) & (corr[rows] >= 0) & ~blocking
        tokens[hit] = g_name[jc[hit]]
    seqs: list[LaunchSequence] = []
    threads, counts = np.unique(tid[rows], return_counts=True)
    by_count = threads[np.argsort(-counts, kind="stable")]
    listed = ", ".join(str(int(t)) for t in by_count)
    seqs.append(LaunchSequence(tokens, start[rows], end[rows], blocking, f"threads {listed}"))
    if threads.size > 1:
        for t in by_count:
            m = tid[rows] == t
            seqs.append(
                LaunchSequence(tokens[m], start[rows][m], end[rows][m], blocking[m], f"thread {int(t)}")
            )
    return seqs


# ---- the period ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Period:
    lag: int  # 0 when none was found
    match: float  # fraction of positions equal one lag later (on the common window)
    best_lag: int
    best_match: float
    reason: str = ""  # why there is no period
    smallest: int = 0  # the smallest lag within the margin, even when it is too short to be a step


def _estimated_match(tokens: np.ndarray, max_lag: int) -> np.ndarray:
    """Estimated fraction of positions i with tokens[i] == tokens[i + lag], for lags 0..max_lag:
    each token becomes random unit phases, whose autocorrelation (FFT) sums 1 per equal pair and
    noise around 0 for unequal ones."""
    n = tokens.size
    _, inv = np.unique(tokens, return_inverse=True)
    rng = np.random.default_rng(0)
    phases = np.exp(2j * np.pi * rng.random((int(inv.max()) + 1, EMBED_DIMS))).astype(np.complex64)
    z = phases[inv]
    size = 1 << int(np.ceil(np.log2(2 * n)))
    f = np.fft.fft(z, n=size, axis=0)
    ac = np.fft.ifft(f * np.conj(f), axis=0)[: max_lag + 1]
    return ac.real.sum(axis=1) / EMBED_DIMS / (n - np.arange(max_lag + 1))


def find_period(tokens: np.ndarray) -> Period:
    """The step period of a token sequence (Period.lag 0 with a reason when there is none)."""
    t = np.asarray(tokens)[:MAX_TOKENS]
    n = t.size
    max_lag = n // MIN_REPEATS
    if max_lag < MIN_PERIOD:
        return Period(0, 0.0, 0, 0.0, f"only {n} launches: too few to repeat {MIN_REPEATS} times")
    est = _estimated_match(t, max_lag)
    top = 1 + np.argsort(-est[1:], kind="stable")[:SHORTLIST]  # lag 0 matches trivially
    cand = set(top.tolist())
    for lag in top[:4].tolist():
        for k in range(2, MAX_DIVISOR + 1):
            c = round(lag / k)
            if c < 1:
                break
            cand.update(x for x in (c - 1, c, c + 1) if 1 <= x <= max_lag)
    lags = np.array(sorted(cand), dtype=np.int64)
    window = n - int(lags.max())  # one common window: every lag judged on the same positions
    match = np.array(
        [np.count_nonzero(t[:window] == t[lag : lag + window]) / window for lag in lags.tolist()]
    )
    best = int(np.argmax(match))
    best_lag, best_match = int(lags[best]), float(match[best])
    if best_match < MIN_MATCH:
        return Period(
            0,
            0.0,
            best_lag,
            best_match,
            f"no repeating launch sequence (the best lag, {best_lag} launches, repeats only "
            f"{best_match:.0%} of them; {MIN_MATCH:.0%} needed)",
        )
    limit = MISMATCH_SLACK * (1.0 - best_match) + MISMATCH_MARGIN
    ok = np.flatnonzero(1.0 - match <= limit)
    lag = int(lags[ok[0]])
    if lag < MIN_PERIOD:
        return Period(
            0,
            0.0,
            best_lag,
            best_match,
            "the launch sequence is one operation repeated, with no recurring host pause to cut it by",
            smallest=lag,
        )
    return Period(lag, float(match[ok[0]]), best_lag, best_match, smallest=lag)


# ---- steps made of repeated blocks: the recurring host pause -------------------------------------
PAUSE_RATIO = 3.0  # the step-boundary pause must be this many times the typical pause
PAUSE_QUANTILE = 25  # per phase, this percentile of the pauses over the periods (robust to set-up)
PAUSE_NEAR_BEST = 0.7  # the smallest multiple whose ratio is this close to the best one
MAX_MULTIPLE = 256
SHORT_BLOCK = 8  # a token period shorter than this is a block inside the step, not a training step


@dataclass(frozen=True)
class PausePeriod:
    lag: int  # a multiple of the token period
    ratio: float  # the recurring pause over the typical pause
    threshold: float  # ns: pauses at least this long are step boundaries


def pause_period(seq: LaunchSequence, base: int) -> PausePeriod:
    """When a step repeats the same short block of launches k times (a loop inside the step; used
    for token periods under SHORT_BLOCK), the tokens repeat every block, but the host pauses once per step (Python between iterations, the data
    loader): fold the pauses before each launch at every multiple q of the token period and keep the
    smallest q at which one phase pauses PAUSE_RATIO times longer than usual in (nearly) every period."""
    pause = np.maximum(np.r_[0, seq.start[1:] - seq.end[:-1]], 0).astype(np.float64)[:MAX_TOKENS]
    n = pause.size
    typical = max(float(np.median(pause)), 1.0)
    results = []
    for m in range(1, min(MAX_MULTIPLE, n // (MIN_REPEATS * base)) + 1):
        q = m * base
        k = n // q
        fold = np.percentile(pause[: k * q].reshape(k, q), PAUSE_QUANTILE, axis=0)
        results.append((q, float(fold.max()) / typical))
    if not results:
        return PausePeriod(base, 0.0, 0.0)
    best = max(r for _, r in results)
    if best < PAUSE_RATIO:
        return PausePeriod(base, best, 0.0)
    q, ratio = next((q, r) for q, r in results if r >= PAUSE_NEAR_BEST * best)
    return PausePeriod(q, ratio, typical * np.sqrt(ratio))


def _centered_max(x: np.ndarray, h: int) -> np.ndarray:
    """max(x[i-h : i+h+1]) for every i, in O(n) (van Herk / Gil-Werman: block prefix and suffix
    maxima)."""
    w = 2 * h + 1
    n = x.size
    lo = np.iinfo(np.int64).min
    total = -(-(n + 2 * h) // w) * w
    padded = np.full(total, lo, dtype=np.int64)
    padded[h : h + n] = x
    blocks = padded.reshape(-1, w)
    prefix = np.maximum.accumulate(blocks, axis=1).ravel()
    suffix = np.maximum.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    i = np.arange(n)
    return np.maximum(suffix[i], prefix[np.minimum(i + w - 1, total - 1)])


def cut_by_pause(seq: LaunchSequence, pp: PausePeriod) -> tuple[np.ndarray, np.ndarray]:
    """Steps starting at the launches that follow a step-boundary pause (in rhythm); the first step
    also when the sequence starts with it, without a pause before."""
    q = pp.lag
    n = seq.tokens.size
    pause = np.r_[0, seq.start[1:] - seq.end[:-1]]
    # boundaries: long pauses that are the longest within half a step on either side
    peak = pause >= _centered_max(pause, q // 2)
    pos = _in_rhythm(np.flatnonzero((pause >= pp.threshold) & peak), q)
    if pos.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    tol = max(1, q // 20)
    if pos[0] >= q - tol:
        pos = np.r_[max(0, int(pos[0]) - q), pos]
    starts = seq.start[pos]
    last = min(n - 1, int(pos[-1]) + q - 1)
    ends = np.r_[starts[1:], seq.end[pos[-1] : last + 1].max()]
    return starts.astype(np.int64), ends.astype(np.int64)


# ---- the anchor ----------------------------------------------------------------------------------
def steady_mask(tokens: np.ndarray, period: int) -> np.ndarray:
    """Positions in the repeating part: equal to the token one period earlier or later."""
    n = tokens.size
    steady = np.zeros(n, dtype=bool)
    if 0 < period < n:
        eq = tokens[:-period] == tokens[period:]
        steady[:-period] |= eq
        steady[period:] |= eq
    return steady


def _once_per_period(ids: np.ndarray, period: int, steady: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ids that occur once per period in rhythm in the repeating part (successive occurrences
    `period` apart, within 5%, for ANCHOR_RHYTHM of them): (candidate ids, occurrence counts)."""
    n = int(steady.sum())
    keep = np.flatnonzero(steady)
    if keep.size == 0:
        return ids[:0], np.zeros(0, dtype=np.int64)
    ids = ids[keep]
    order = np.lexsort((keep, ids))
    srt = ids[order]
    new = np.r_[True, srt[1:] != srt[:-1]]
    gid = np.cumsum(new) - 1
    uniq = srt[new]
    occ = np.bincount(gid)
    d = np.diff(keep[order])
    same = ~new[1:]
    tol = max(1, period // 20)
    good = same & (np.abs(d - period) <= tol)
    n_good = np.bincount(gid[1:][good], minlength=uniq.size)
    ok = (occ >= MIN_REPEATS) & (n_good >= ANCHOR_RHYTHM * (occ - 1)) & (occ <= n / period + 2)
    return uniq[ok], occ[ok]


@dataclass(frozen=True)
class Anchor:
    ids: np.ndarray  # per token position: the id the anchor is matched on (token or bigram)
    value: int
    at_end: bool  # True: the step ends when this blocking call returns; False: it starts here
    name: str


def find_anchor(seq: LaunchSequence, period: int, timeline: Timeline) -> Anchor | None:
    """A token that occurs once per step (see the module doc); tokens first, then token pairs."""
    tok = seq.tokens
    big = np.r_[-1, tok[:-1]] * (int(tok.max()) + 2) + tok  # (previous, this) pairs
    pause = np.r_[0, seq.start[1:] - seq.end[:-1]]
    duration = seq.end - seq.start
    steady = steady_mask(tok, period)
    for ids, label in ((tok, ""), (big, "after its predecessor")):
        cand, _ = _once_per_period(ids, period, steady)
        if cand.size == 0:
            continue
        # per candidate: median call duration (blocking ones) and median host pause before it
        pos_c = np.isin(ids, cand) & steady
        cid = np.searchsorted(cand, ids[pos_c])
        blk = np.bincount(cid, weights=seq.blocking[pos_c], minlength=cand.size) > 0
        med_dur = _group_median(cid, duration[pos_c], cand.size)
        med_pause = _group_median(cid, pause[pos_c], cand.size)
        if blk.any():
            k = int(np.flatnonzero(blk)[np.argmax(med_dur[blk])])
            at_end = True
        else:
            k = int(np.argmax(med_pause))
            at_end = False
        first = int(np.flatnonzero(ids == cand[k])[0])
        name = timeline.name(int(tok[first])) or "?"
        if label:
            name = f"{name} {label} {timeline.name(int(tok[first - 1])) if first else ''}".rstrip()
        return Anchor(ids, int(cand[k]), at_end, name)
    return None


def _group_median(gid: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Median of `values` per group id (vectorized: one sort)."""
    order = np.lexsort((values, gid))
    g, v = gid[order], values[order]
    counts = np.bincount(g, minlength=groups)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    mid = first + np.maximum(counts - 1, 0) // 2
    out = np.zeros(groups, dtype=np.float64)
    has = counts > 0
    out[has] = v[mid[has]]
    return out


# ---- cutting the steps ---------------------------------------------------------------------------
def _in_rhythm(pos: np.ndarray, period: int) -> np.ndarray:
    """Occurrences with a neighbour occurrence about one period away (drops set-up clusters)."""
    if pos.size < 2:
        return pos
    d = np.diff(pos)
    near = np.abs(d - period) <= period // 2
    keep = np.r_[near, False] | np.r_[False, near]
    return pos[keep]


def _first_step_start(tok: np.ndarray, pos: np.ndarray, period: int) -> int:
    """Where the first step of an end-anchored sequence starts: at the pair of tokens that steadily
    follows the anchor, at its last occurrence at least one period before the first anchor (the
    warm-up step has at least a period's launches, often more) and at most three periods before;
    else exactly one period before the first anchor."""
    n = tok.size
    p0 = int(pos[0])
    fallback = max(0, p0 - period + 1)
    nxt = pos[:-1] + 1 if pos.size > 1 else pos[:1] + 1
    nxt = nxt[nxt + 1 < n]
    if nxt.size == 0:
        return fallback
    pairs = tok[nxt] * (int(tok.max()) + 1) + tok[nxt + 1]
    vals, cnt = np.unique(pairs, return_counts=True)
    follow = vals[np.argmax(cnt)]
    lo = max(0, p0 - 3 * period)
    hi = fallback  # inclusive
    if hi + 1 >= n or hi < lo:
        return fallback
    here = tok[lo : hi + 1] * (int(tok.max()) + 1) + tok[lo + 1 : hi + 2]
    hit = np.flatnonzero(here == follow)
    return lo + int(hit[-1]) if hit.size else fallback


def _with_warmup_start(anchor: Anchor, tok: np.ndarray, pos: np.ndarray, period: int) -> np.ndarray:
    """A start anchor's occurrence in a longer warm-up step is not in the repeating part (the next
    occurrence is more than a period later): take it back when it lies one to three periods before
    the first steady one and is followed by the token that steadily follows the anchor."""
    n = tok.size
    p0 = int(pos[0])
    tol = max(1, period // 20)
    lo, hi = max(0, p0 - 3 * period), max(0, p0 - period + tol + 1)
    if hi <= lo or p0 + 1 >= n:
        return pos
    after = pos[pos + 1 < n] + 1
    vals, cnt = np.unique(tok[after], return_counts=True)
    follow = vals[np.argmax(cnt)]
    prev = lo + np.flatnonzero(anchor.ids[lo:hi] == anchor.value)
    prev = prev[(prev + 1 < n) & (tok[np.minimum(prev + 1, n - 1)] == follow)]
    return np.r_[prev[-1:], pos] if prev.size else pos


def cut_steps(seq: LaunchSequence, period: int, anchor: Anchor) -> tuple[np.ndarray, np.ndarray]:
    """Step (start, end) ns from the anchor's in-rhythm occurrences."""
    tok = seq.tokens
    n = tok.size
    steady = steady_mask(tok, period)
    pos = _in_rhythm(np.flatnonzero((anchor.ids == anchor.value) & steady), period)
    if pos.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    if anchor.at_end:
        ends = seq.end[pos]
        first = _first_step_start(tok, pos, period)
        starts = np.r_[seq.start[first], ends[:-1]]
        tail = n - 1 - int(pos[-1])  # launches after the last anchor: a last step when ≥ half a period
        if tail >= max(1, period // 2):
            starts = np.r_[starts, ends[-1]]
            ends = np.r_[ends, seq.end[int(pos[-1]) + 1 : int(pos[-1]) + period + 1].max()]
    else:
        pos = _with_warmup_start(anchor, tok, pos, period)
        starts = seq.start[pos]
        last = min(n - 1, int(pos[-1]) + period - 1)
        ends = np.r_[starts[1:], seq.end[pos[-1] : last + 1].max()]
    return starts.astype(np.int64), ends.astype(np.int64)


def infer_steps(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Inferred steps of a rank: (start, end, note). Empty arrays and a note saying why when none."""
    seqs = launch_sequences(timeline, rank)
    if not seqs:
        empty = np.zeros(0, dtype=np.int64)
        return (
            empty,
            empty,
            f"rank {rank}: no training steps found: no step markers and no launches to infer steps from",
        )
    reasons = []
    for seq in seqs:
        per = find_period(seq.tokens)
        base = per.lag or per.smallest
        if 0 < base < SHORT_BLOCK:
            pp = pause_period(seq, base)
            if pp.lag > base:  # the tokens repeat inside the step: the recurring pause finds it
                s, e = cut_by_pause(seq, pp)
                if s.size >= MIN_REPEATS:
                    note = (
                        f"rank {rank}: no step markers; {s.size} steps inferred from the launch sequence "
                        f"of {seq.where}: a block of {base} launches repeats, and every {pp.lag} launches "
                        f"the host pauses {pp.ratio:.0f}× longer than usual; each step starts after that pause"
                    )
                    return s, e, note
        if not per.lag:
            reasons.append(f"{seq.where}: {per.reason}")
            continue
        anchor = find_anchor(seq, per.lag, timeline)
        if anchor is None:
            reasons.append(f"{seq.where}: period {per.lag} launches but no operation occurs once per period")
            continue
        s, e = cut_steps(seq, per.lag, anchor)
        if s.size < MIN_REPEATS:
            reasons.append(f"{seq.where}: period {per.lag} launches but only {s.size} steps cut")
            continue
        where = "ends when it returns" if anchor.at_end else "starts at its launch"
        note = (
            f"rank {rank}: no step markers; {s.size} steps inferred from the launch sequence of "
            f"{seq.where} (period {per.lag} launches, {per.match:.0%} repeat one period later); each "
            f"step {where}: {anchor.name}"
        )
        return s, e, note
    empty = np.zeros(0, dtype=np.int64)
    return (
        empty,
        empty,
        f"rank {rank}: no training steps found: no step markers, and none inferred: " + "; ".join(reasons),
    )


def find_steps(timeline: Timeline) -> Steps:
    """Steps of every rank: marked ones where the trace has markers, else inferred ones."""
    steps: list[Step] = []
    notes: list[str] = []
    for rank in _ranks(timeline):
        s, e = marked_steps(timeline, rank)
        source: StepSource = "marked"
        if s.size == 0:
            s, e, note = infer_steps(timeline, rank)
            source = "inferred"
            notes.append(note)
        steps.extend(
            Step(rank=rank, index=i, start_ns=int(a), end_ns=int(b), source=source)
            for i, (a, b) in enumerate(zip(s.tolist(), e.tolist(), strict=True))
        )
    return Steps(steps=tuple(steps), notes=tuple(notes))
