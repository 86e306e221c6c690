"""Cutting a repeating call sequence into steps (docs/DESIGN.md "Steps", steps 3–4): where the repetition
is, where a step boundary lies (the anchor) and the steps cut there. Steps made of a repeated short block
(the recurring host pause) are cut here too (`cut_by_pause`), steps of one launch each (graph replays, host-paced
launches) in steps.infer, and host activity before a step's first call is given to it by steps.anchor.
Used by `steps.infer_steps`."""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import distinct_counts
from tracelab.analyses.core.names import short_name
from tracelab.analyses.steps.sequence import MAX_TOKENS, MIN_REPEATS, NO_KGRAM, LaunchSequence, kgram_levels
from tracelab.model import Timeline

Cut = tuple[np.ndarray, np.ndarray]  # (start ns, end ns) of the steps, int64

ANCHOR_RHYTHM = 0.8  # an anchor's successive occurrences are P apart this often
REPEAT_FROM_START = 0.9  # the repetition starts where this share of the next period already repeats
KGRAM_MAX = 1 << 14  # longest run of calls the trace-start anchor is identified by
PAUSE_KGRAM_MAX = 256  # ... and a pause anchor (64 was the most any bundled or corpus trace needed)
SHORT_BLOCK = 8  # a token period shorter than this is a block inside the step, not a training step


def _empty() -> Cut:
    e = np.zeros(0, dtype=np.int64)
    return e, e


def host_pauses(seq: LaunchSequence) -> np.ndarray:
    """Host time between each call and the one before it (0 for the first), int64 ns."""
    return np.maximum(np.r_[0, seq.start[1:] - seq.end[:-1]], 0).astype(np.int64)


# ---- where the repetition is ---------------------------------------------------------------------
def steady_mask(tokens: np.ndarray, period: int) -> np.ndarray:
    """Positions in the repeating part: equal to the token one period earlier or later."""
    n = tokens.size
    steady = np.zeros(n, dtype=bool)
    if 0 < period < n:
        eq = tokens[:-period] == tokens[period:]
        steady[:-period] |= eq
        steady[period:] |= eq
    return steady


_BLOCK = 1 << 16  # positions looked at a time by repetition_start


def repetition_start(tok: np.ndarray, period: int) -> int:
    """First position whose token repeats one period later while REPEAT_FROM_START of the next
    period repeats too: where the repetition begins; -1 when nowhere."""
    n = tok.size
    if not 0 < period < n:
        return -1
    last = n - period  # windows [i, i + period) inside the sequence
    # in blocks of positions, first to last (the repetition usually begins near the start of a long
    # sequence): block [lo, hi) needs the matches up to hi + period only
    block = max(_BLOCK, 4 * period)
    for lo in range(0, last, block):
        hi = min(last, lo + block)
        eq = tok[lo : min(last, hi + period)] == tok[lo + period : min(last, hi + period) + period]
        c = np.r_[0, np.cumsum(eq)]
        idx = np.arange(lo, hi)
        win = c[np.minimum(idx + period, last) - lo] - c[idx - lo]
        ok = np.flatnonzero(eq[: hi - lo] & (win >= REPEAT_FROM_START * np.minimum(period, last - idx)))
        if ok.size:
            return lo + int(ok[0])
    return -1


def _repeating_run_end(tok: np.ndarray, at: int, period: int) -> int:
    """Exclusive end of the run from `at` (at most one period long) whose tokens equal the token one
    period earlier: the last step's launches, before the teardown after the loop."""
    hi = min(tok.size, at + period)
    lo = max(at, period)
    if hi <= lo:
        return hi
    bad = np.flatnonzero(tok[lo:hi] != tok[lo - period : hi - period])
    return lo + int(bad[0]) if bad.size else hi


def once_per_period(ids: np.ndarray, period: int, steady: np.ndarray) -> np.ndarray:
    """Ids (not NO_KGRAM) that occur once per period in rhythm in the repeating part: successive
    occurrences `period` apart (within 5%) for ANCHOR_RHYTHM of them."""
    n = int(steady.sum())
    keep = np.flatnonzero(steady)
    if keep.size == 0:
        return ids[:0]
    uniq, gid, occ, d, same = _by_value(ids[keep], keep)
    tol = max(1, period // 20)
    good = same & (np.abs(d - period) <= tol)
    n_good = np.bincount(gid[1:][good], minlength=uniq.size)
    ok = (occ >= MIN_REPEATS) & (n_good >= ANCHOR_RHYTHM * (occ - 1)) & (occ <= n / period + 2)
    return uniq[ok & (uniq != NO_KGRAM)]


def _by_value(values: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, ...]:
    """The occurrences grouped by value (by value, then position): the distinct values, each occurrence's
    group there, each value's count, the position steps between successive occurrences and whether each
    step stays within one value."""
    order = np.lexsort((pos, values))
    srt = values[order]
    new = np.r_[True, srt[1:] != srt[:-1]]
    gid = np.cumsum(new) - 1
    return srt[new], gid, np.bincount(gid), np.diff(pos[order]), ~new[1:]


def _candidates(ids: np.ndarray, period: int, steady: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ids once per period (`once_per_period`), where they occur in the repeating part and each of
    those occurrences' index among them."""
    cand = once_per_period(ids, period, steady)
    if cand.size == 0:
        return cand, cand, cand
    pos_c = np.isin(ids, cand) & steady
    return cand, pos_c, np.searchsorted(cand, ids[pos_c])


def group_quantile(gid: np.ndarray, values: np.ndarray, groups: int, q: float = 0.5) -> np.ndarray:
    """The q-quantile (lower nearest rank) of `values` per group id (vectorized: one sort)."""
    order = np.lexsort((values, gid))
    g, v = gid[order], values[order]
    counts = np.bincount(g, minlength=groups)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    at = first + np.floor(q * np.maximum(counts - 1, 0)).astype(np.int64)
    out = np.zeros(groups, dtype=np.float64)
    has = counts > 0
    out[has] = v[at[has]]
    return out


def in_rhythm(pos: np.ndarray, period: int) -> np.ndarray:
    """Occurrences with a neighbour occurrence about one period away (drops set-up clusters)."""
    if pos.size < 2:
        return pos
    d = np.diff(pos)
    near = np.abs(d - period) <= period // 2
    keep = np.r_[near, False] | np.r_[False, near]
    return pos[keep]


# ---- the anchor ----------------------------------------------------------------------------------
class Anchor(msgspec.Struct, frozen=True):
    pos: np.ndarray  # positions in the sequence of the step boundaries, in rhythm
    at_end: bool  # True: a step ends when the call at pos returns; False: it starts at pos
    name: str  # what the anchor is, for the note
    how: str  # "trace_start" | "input_copy" | "blocking" | "pause"
    first: int = -1  # where the first step starts, when known (the trace's start)


def _call_name(timeline: Timeline, token: int) -> str:
    """A token's name as the notes print it (one line: kernel names shortened)."""
    return short_name(timeline.name(int(token)) or "?")


def _anchor_name(timeline: Timeline, tok: np.ndarray, at: int, k: int) -> str:
    name = _call_name(timeline, tok[at])
    if k > 1 and at + 1 < tok.size:
        name = f"{name}, then {_call_name(timeline, tok[at + 1])}"
        if k > 2:
            name += f" (and {k - 2} more calls)"
    return name


def _trace_start_anchor(seq: LaunchSequence, period: int, steady: np.ndarray, timeline: Timeline, origin: np.ndarray,
                        ) -> Anchor | None:
    """When the trace starts with the repetition (the profiler was started between steps:
    torch.profiler's schedule, cudaProfilerStart), the first repeating call starts a step: the run
    of k calls from there (the smallest k that occurs once per period) starts every step. When the
    call before it is, in rhythm, a blocking call, each step ends when that call returns instead.
    `origin`: start times of every call of the rank (all threads): at most a few may come first."""
    tok = seq.tokens
    i0 = repetition_start(tok, period)
    prologue = max(2, period // 4)
    if not 0 <= i0 <= prologue or np.searchsorted(origin, seq.start[i0]) > prologue:
        return None
    n_steady = int(steady.sum())
    for k, ids in kgram_levels(tok, min(period, KGRAM_MAX)):
        if ids[i0] == NO_KGRAM:
            break
        at = np.flatnonzero((ids == ids[i0]) & steady)
        d = np.diff(at)
        in_time = np.abs(d - period) <= max(1, period // 20)
        if not (MIN_REPEATS <= at.size <= n_steady / period + 2 and in_time.sum() >= ANCHOR_RHYTHM * d.size):
            continue  # not once per period, in rhythm (as once_per_period judges every id)
        pos = in_rhythm(at, period)
        pos = pos[pos >= i0]
        if pos.size < MIN_REPEATS:
            return None
        before = pos[1:] - 1
        if before.size and np.mean(seq.blocking[before]) >= ANCHOR_RHYTHM:
            return Anchor(before, True, _call_name(timeline, tok[before[0]]), "blocking", first=i0)
        return Anchor(pos, False, _anchor_name(timeline, tok, i0, k), "trace_start", first=i0)
    return None


def _blocking_anchor(seq: LaunchSequence, period: int, steady: np.ndarray, timeline: Timeline, origin: np.ndarray,
                     ) -> Anchor | None:
    """A blocking call (else a call pair ending in one) once per period, the longest: each step
    ends when it returns (`loss.item()`'s cudaStreamSynchronize)."""
    tok = seq.tokens
    big = np.r_[-1, tok[:-1]] * (int(tok.max()) + 2) + tok  # (previous, this) pairs
    duration = seq.end - seq.start
    for ids, label in ((tok, ""), (big, "after its predecessor")):
        cand, pos_c, cid = _candidates(ids, period, steady)
        if cand.size == 0:
            continue
        blk = np.bincount(cid, weights=seq.blocking[pos_c], minlength=cand.size) > 0
        if not blk.any():
            continue
        med_dur = group_quantile(cid, duration[pos_c], cand.size)
        c = int(np.flatnonzero(blk)[np.argmax(med_dur[blk])])
        first = int(np.flatnonzero(ids == cand[c])[0])
        name = _call_name(timeline, tok[first])
        if label and first:
            name = f"{name} {label} {_call_name(timeline, tok[first - 1])}"
        pos = in_rhythm(np.flatnonzero((ids == cand[c]) & steady), period)
        return Anchor(pos, True, name, "blocking")
    return None


def _pause_anchor(seq: LaunchSequence, period: int, steady: np.ndarray, timeline: Timeline, origin: np.ndarray,
                  ) -> Anchor | None:
    """The run of k calls once per period (k = 1, 2, 4, ...) after the longest median host pause:
    each step starts at its first call (the first launch of the forward pass after the data
    loader)."""
    tok = seq.tokens
    pause = host_pauses(seq).astype(np.float64)
    best: tuple[float, int, np.ndarray, int] | None = None
    for k, ids in kgram_levels(tok, min(period, PAUSE_KGRAM_MAX)):
        cand, pos_c, cid = _candidates(ids, period, steady)
        if cand.size == 0:
            continue
        med_pause = group_quantile(cid, pause[pos_c], cand.size)
        c = int(np.argmax(med_pause))
        if best is None or med_pause[c] > best[0]:
            best = (float(med_pause[c]), k, ids, int(cand[c]))
    if best is None:
        return None
    _, k, ids, value = best
    pos = in_rhythm(np.flatnonzero((ids == value) & steady), period)
    if pos.size == 0:
        return None
    pos = _with_warmup_start(ids, value, tok, pos, period)
    return Anchor(pos, False, _anchor_name(timeline, tok, int(pos[0]), k), "pause")


INPUT_COPY = "Memcpy HtoD"  # the token of a host-to-device copy launch (the batch upload)


def _input_copy_anchor(seq: LaunchSequence, period: int, steady: np.ndarray, timeline: Timeline, origin: np.ndarray,
                       ) -> Anchor | None:
    """A host-to-device copy once per period: the upload of the step's batch, where a training
    iteration begins (its forward pass follows). Each step starts at it; with several, the first in
    the period."""
    tok = seq.tokens
    cand = once_per_period(tok, period, steady)
    copies = [int(c) for c in cand.tolist() if (timeline.name(int(c)) or "").startswith(INPUT_COPY)]
    if not copies:
        return None
    firsts = {c: int(np.flatnonzero((tok == c) & steady)[0]) for c in copies}
    value = min(copies, key=lambda c: firsts[c])
    pos = in_rhythm(np.flatnonzero((tok == value) & steady), period)
    if pos.size < MIN_REPEATS:
        return None
    pos = _with_warmup_start(tok, value, tok, pos, period)
    return Anchor(pos, False, _call_name(timeline, value), "input_copy")


def regular_period(tok: np.ndarray, base: int) -> int:
    """The period of a loop whose calls repeat a short block (period `base`) many times per
    iteration: the spacing of the calls that occur once per iteration, in rhythm (a batch copy, the
    first matmul, a reduction). 0 when no call is rarer than the block and evenly spaced."""
    n = tok.size
    if n < 2 * MIN_REPEATS or base <= 0:
        return 0
    _, gid, occ, gaps, same = _by_value(tok, np.arange(n))
    best = votes = 0
    for g in np.flatnonzero((occ >= MIN_REPEATS) & (occ * base * 2 <= n)).tolist():
        d = gaps[same & (gid[1:] == g)]
        if d.size == 0:
            continue
        p = int(np.median(d))
        if p <= max(base, SHORT_BLOCK - 1) or np.mean(np.abs(d - p) <= max(1, p // 20)) < ANCHOR_RHYTHM:
            continue
        if int(occ[g]) > votes or (int(occ[g]) == votes and p < best):
            best, votes = p, int(occ[g])
    if not best or best >= n:
        return 0
    match = float(np.mean(tok[:-best] == tok[best:]))
    return best if match >= REGULAR_MATCH else 0


REGULAR_MATCH = 0.75  # a regular period must repeat this share of calls one period later


def find_anchor(seq: LaunchSequence, period: int, timeline: Timeline, origin: np.ndarray | None = None) -> Anchor | None:
    """What marks a step boundary, in this order: the trace's start (when the trace starts with
    the repetition), a host-to-device copy once per period (the batch upload that begins an
    iteration), a blocking call once per period, the longest recurring host pause. `origin`:
    start times of every call of the rank (default: the sequence's own)."""
    steady = steady_mask(seq.tokens, period)
    origin = seq.start if origin is None else origin
    for rule in (_trace_start_anchor, _input_copy_anchor, _blocking_anchor, _pause_anchor):
        anchor = rule(seq, period, steady, timeline, origin)
        if anchor is not None and anchor.pos.size:
            return anchor
    return None


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
    vals, cnt = distinct_counts(pairs)
    follow = vals[np.argmax(cnt)]
    lo = max(0, p0 - 3 * period)
    hi = fallback  # inclusive
    if hi + 1 >= n or hi < lo:
        return fallback
    here = tok[lo : hi + 1] * (int(tok.max()) + 1) + tok[lo + 1 : hi + 2]
    hit = np.flatnonzero(here == follow)
    return lo + int(hit[-1]) if hit.size else fallback


def _with_warmup_start(ids: np.ndarray, value: int, tok: np.ndarray, pos: np.ndarray, period: int) -> np.ndarray:
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
    vals, cnt = distinct_counts(tok[after])
    follow = vals[np.argmax(cnt)]
    prev = lo + np.flatnonzero(ids[lo:hi] == value)
    prev = prev[(prev + 1 < n) & (tok[np.minimum(prev + 1, n - 1)] == follow)]
    return np.r_[prev[-1:], pos] if prev.size else pos


def cut_steps(seq: LaunchSequence, period: int, anchor: Anchor) -> Cut:
    """Step (start, end) ns from the anchor's positions. Steps are contiguous; the last one ends
    with the last call that still repeats the step before it (not the teardown after the loop)."""
    tok = seq.tokens
    pos = anchor.pos
    if anchor.at_end:
        ends = seq.end[pos]
        first = anchor.first if anchor.first >= 0 else _first_step_start(tok, pos, period)
        starts = np.r_[seq.start[first], ends[:-1]]
        after = int(pos[-1]) + 1  # calls after the last anchor: a last step when ≥ half a period
        stop = _repeating_run_end(tok, after, period)
        if stop - after >= max(1, period // 2):
            starts = np.r_[starts, ends[-1]]
            ends = np.r_[ends, seq.end[after:stop].max()]
    else:
        starts = seq.start[pos]
        stop = _repeating_run_end(tok, int(pos[-1]), period)
        ends = np.r_[starts[1:], seq.end[int(pos[-1]) : max(stop, int(pos[-1]) + 1)].max()]
    return starts.astype(np.int64), ends.astype(np.int64)


PAUSE_RATIO = 3.0  # the step-boundary pause must be this many times the typical pause
PAUSE_QUANTILE = 25  # per phase, this percentile of the pauses over the periods (robust to set-up)
PAUSE_NEAR_BEST = 0.7  # the smallest multiple whose ratio is this close to the best one
MAX_MULTIPLE = 256


class PausePeriod(msgspec.Struct, frozen=True):
    lag: int  # a multiple of the token period
    ratio: float  # the recurring pause over the typical pause
    threshold: float  # ns: pauses at least this long are step boundaries


def pause_period(seq: LaunchSequence, base: int) -> PausePeriod:
    """When a step repeats the same short block of launches k times (a loop inside the step; used
    for token periods under SHORT_BLOCK), the tokens repeat every block, but the host pauses once
    per step (Python between iterations, the data loader): fold the pauses before each launch at
    every multiple q of the token period and keep the smallest q at which one phase pauses
    PAUSE_RATIO times longer than usual in (nearly) every period."""
    pause = host_pauses(seq).astype(np.float64)[:MAX_TOKENS]
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


def cut_by_pause(seq: LaunchSequence, pp: PausePeriod) -> Cut:
    """Steps starting at the calls that follow a step-boundary pause (in rhythm); the first step
    also when the sequence starts with it, without a pause before."""
    q = pp.lag
    pause = host_pauses(seq)
    # boundaries: long pauses that are the longest within half a step on either side
    peak = pause >= _centered_max(pause, q // 2)
    pos = in_rhythm(np.flatnonzero((pause >= pp.threshold) & peak), q)
    if pos.size == 0:
        return _empty()
    tol = max(1, q // 20)
    if pos.size > 2 and pos[1] - pos[0] < q and np.median(np.diff(pos[1:])) == q:
        # steps of exactly q calls, but a shorter first one (the first call has no pause before it
        # to tell; a slow first launch makes the second look like a boundary): q calls too
        pos = np.r_[max(0, int(pos[1]) - q), pos[1:]]
    elif pos[0] >= q - tol:
        pos = np.r_[max(0, int(pos[0]) - q), pos]
    # the teardown after the loop (a final synchronize after a pause) is no step
    stop = _repeating_run_end(seq.tokens, int(pos[-1]), q)
    if pos.size > 1 and stop - int(pos[-1]) < q // 2:
        pos = pos[:-1]
        stop = _repeating_run_end(seq.tokens, int(pos[-1]), q)
    starts = seq.start[pos]
    ends = np.r_[starts[1:], seq.end[int(pos[-1]) : max(stop, int(pos[-1]) + 1)].max()]
    return starts.astype(np.int64), ends.astype(np.int64)
