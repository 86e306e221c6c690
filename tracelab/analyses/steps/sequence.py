"""The host call sequences that step inference looks for a repetition in, and the period of one
(docs/DESIGN.md "Steps", steps 1–2). Used by `steps.infer_steps` through `step_cut`."""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import FirstPosition, distinct_codes, distinct_counts
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.rows import names_matching, rows_of
from tracelab.model import GPU_ACTIVITY_KINDS, Flag, Timeline
from tracelab.model.grouping import member, stable_order
from tracelab.model.kinds import HOST_API_KINDS

GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")
# polling calls: how often the host asks depends on timing (the caching allocator's event queries),
# so they are no part of a step's fixed sequence
POLLING = re.compile(r"^cu(da)?(Event|Stream)Query")
# the caching allocators' calls: a new block is asked for when the cached ones run out (every few steps
# when each step keeps its outputs), so they are no part of a step's fixed sequence either; PyTorch's
# device allocator asks cudaStreamIsCapturing right before each cudaMalloc (cudaMallocMaybeCapturing)
ALLOCATOR = re.compile(r"^(cu(da)?(Malloc|Free|MemAlloc|MemFree|HostAlloc)(Async|Host|Managed|Pitch)?"
                       r"|cuMem(Create|Map|Unmap|Release|SetAccess|AddressReserve|AddressFree))(_v\d+)?$")
CAPTURE_QUERY = re.compile(r"^cu(da)?StreamIsCapturing(_v\d+)?$")
ALLOCATOR_SPREAD = 4  # the allocator's calls are left out only when some lie in each of this many parts of the run
MAX_THREADS = 4  # launching threads tried alone (most launches first)

# ---- the period ----------------------------------------------------------------------------------
MIN_REPEATS = 3  # a period must repeat at least this often in the sequence
MIN_PERIOD = 2  # tokens per step; a period of 1 means "one operation over and over"
MIN_MATCH = 0.6  # fraction of positions equal one period later
MISMATCH_SLACK = 1.5  # the period's mismatch may be this many times the best lag's ...
MISMATCH_MARGIN = 0.1  # ... plus this (an inserted launch costs a period of matches)
MAX_TOKENS = 200_000  # the period is found on the first tokens (the steps are cut on all of them)
EMBED_DIMS = 4  # random phases per token for the FFT estimate
SHORTLIST = 32  # lags with the best estimates whose exact match is counted
MAX_DIVISOR = 64  # the best lags' fractions L/k (k ≤ this) are checked too
DIVIDES_TOLERANCE = 100  # a lag divides the best one when k × lag is within best / this of it


def string_ids(strings: tuple[str, ...], pattern: re.Pattern[str]) -> np.ndarray:
    """Ids of the interned strings that match `pattern`."""
    return np.fromiter((i for i, s in enumerate(strings) if pattern.search(s)), dtype=np.int64)


class LaunchSequence(msgspec.Struct, frozen=True):
    """Host calls (or GPU ops) of one rank in time order, each as a token (a string id)."""

    tokens: np.ndarray  # int64 string ids: the launched GPU op's name, else the call's own name
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    blocking: np.ndarray  # bool: the call blocks the host until GPU work is done
    launch: np.ndarray  # bool: the call launches GPU work
    graph: np.ndarray  # bool: the call launches a CUDA graph (replays a captured workload)
    where: str  # "threads 513, 565, every API call" / "thread 513" / "GPU ops"
    threads: tuple[int, ...] = ()  # the host threads the calls are on


def sequence_variants(timeline: Timeline, rank: int) -> tuple[list[LaunchSequence], list[LaunchSequence] | None]:
    """(the candidate sequences, the same with the caching allocator's calls left out; None when the
    launching threads made none): one pass over the calls for both. The candidates, richest first:
    1. every host API call of the rank's launching threads merged in time order (launches named by
       the GPU op they issued; event records, stream waits ... by their own name: they mark where a
       step ends even when its launches repeat a shorter block; polling calls left out);
    2. only the launches and blocking calls of those threads merged (PyTorch launches the backward
       pass from its autograd thread while the main thread waits);
    3. and 4. the same per launching thread (at most MAX_THREADS, most launches first);
    or the rank's GPU ops in start order when the trace has no host API calls."""
    flags = column(timeline, "flags")
    names = column(timeline, "name")
    start = column(timeline, "start")
    end = column(timeline, "end")
    tid = column(timeline, "tid")
    corr = column(timeline, "correlation")
    # the rank's rows grouped by kind once per timeline (rows.kind_rows): no mask over every event
    api = rows_of(timeline, rank, HOST_API_KINDS)
    gpu_rows = rows_of(timeline, rank, GPU_ACTIVITY_KINDS)
    lb = api[(flags[api] & (Flag.LAUNCH | Flag.BLOCKING)) != 0]
    if lb.size == 0:
        gpu = gpu_rows
        if gpu.size == 0:
            return [], None
        gpu = gpu[np.argsort(start[gpu], kind="stable")]
        none = np.zeros(gpu.size, dtype=bool)
        return [LaunchSequence(names[gpu].astype(np.int64), start[gpu], end[gpu], none, none, none, "GPU ops")], None
    threads, counts = distinct_counts(tid[lb])
    polling = names_matching(timeline, POLLING)
    calls = api[member(tid[api], threads) & ~polling[names[api]]]
    # (rows in ascending position are in start order: the Timeline is sorted by start)
    # token of a launch: the name of the GPU op it issued (by correlation id), else its own name
    gpu = gpu_rows[corr[gpu_rows] >= 0]
    c_names = names[calls]
    tokens = c_names.astype(np.int64)
    c_flags = flags[calls]
    blocking = (c_flags & Flag.BLOCKING) != 0
    launch = (c_flags & Flag.LAUNCH) != 0
    graph = launch & names_matching(timeline, GRAPH_LAUNCH)[c_names]
    if gpu.size:
        j = FirstPosition(corr[gpu]).find(corr[calls])  # the first GPU op with the call's correlation id
        hit = (j >= 0) & ~blocking
        g = gpu[j[hit]]
        tokens[hit] = names[g]
        graph[hit] |= (flags[g] & Flag.GRAPH) != 0
    by_count = threads[np.argsort(-counts, kind="stable")]
    c_tid = tid[calls]
    arrays = _CallArrays(tokens, start[calls], end[calls], c_tid, blocking, launch, graph,
                         np.searchsorted(threads, c_tid))  # every call's thread is one of `threads`
    alloc = _allocator_calls(timeline, calls)
    recorded = _sequences(arrays, by_count, threads)
    # only allocator calls all through the run can break its period (most runs make them at start-up and
    # teardown only): some in each quarter of the calls
    quarters = np.flatnonzero(alloc) * ALLOCATOR_SPREAD // max(alloc.size, 1)
    spread = np.count_nonzero(np.bincount(quarters, minlength=ALLOCATOR_SPREAD)) == ALLOCATOR_SPREAD
    return recorded, (_sequences(arrays.subset(~alloc), by_count, threads) if spread else None)


class _CallArrays(msgspec.Struct, frozen=True):
    tokens: np.ndarray
    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    blocking: np.ndarray
    launch: np.ndarray
    graph: np.ndarray
    thread: np.ndarray  # each call's thread as an index into the sorted launching threads

    def subset(self, m: np.ndarray) -> _CallArrays:
        return _CallArrays(*(getattr(self, f)[m] for f in self.__struct_fields__))


def _sequences(c: _CallArrays, by_count: np.ndarray, threads: np.ndarray) -> list[LaunchSequence]:
    """The candidate sequences of `sequence_variants` from the calls' arrays (`threads`: the launching
    threads, sorted; `by_count`: the same, most launches first)."""
    listed = ", ".join(str(int(t)) for t in by_count)

    def on_threads(codes: np.ndarray) -> tuple[int, ...]:  # the distinct threads of some calls, sorted
        return tuple(int(t) for t in threads[np.bincount(codes, minlength=threads.size) > 0])

    def seq(m: np.ndarray | slice, where: str) -> LaunchSequence:
        return LaunchSequence(c.tokens[m], c.start[m], c.end[m], c.blocking[m], c.launch[m], c.graph[m], where,
                              on_threads(c.thread[m]))

    is_lb = c.launch | c.blocking
    rich = not is_lb.all()  # some calls neither launch nor block: a richer sequence exists
    seqs = [seq(slice(None), f"threads {listed}, every API call")] if rich else []
    seqs.append(seq(is_lb if rich else slice(None), f"threads {listed}"))
    if by_count.size > 1:
        for t in by_count[:MAX_THREADS]:
            mine = c.tid == t
            if rich:
                seqs.append(seq(mine, f"thread {int(t)}, every API call"))
            seqs.append(seq(is_lb & mine, f"thread {int(t)}"))
    return seqs


def _allocator_calls(timeline: Timeline, calls: np.ndarray) -> np.ndarray:
    """Which of the calls (rows in start order) the caching allocator made: allocations and frees, and a
    stream-capture query right before one on the same thread."""
    names = column(timeline, "name")[calls]
    alloc = names_matching(timeline, ALLOCATOR)[names]
    if not alloc.any():
        return alloc
    tid = column(timeline, "tid")[calls]
    order = stable_order(distinct_codes(tid)[1])  # per thread, in start order (a radix sort of thread codes)
    prev = np.full(calls.size, -1, dtype=np.int64)
    same = tid[order][1:] == tid[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    before = prev[alloc]
    before = before[before >= 0]
    out = alloc.copy()
    out[before[names_matching(timeline, CAPTURE_QUERY)[names[before]]]] = True
    return out


NO_KGRAM = -1  # the id of a position with fewer than k calls left


def kgram_levels(tok: np.ndarray, max_k: int) -> Iterator[tuple[int, np.ndarray]]:
    """(k, ids) for k = 1, 2, 4, ... ≤ max_k: a 64-bit polynomial hash (as int64) of the k tokens
    starting at each position, NO_KGRAM where fewer than k remain; each level from the one before
    by doubling, O(n) a level. Equal runs get equal ids; unequal ones collide with probability 2^-64."""
    n = tok.size
    _, h = distinct_codes(tok)
    h = h.astype(np.uint64) + np.uint64(1)
    mult = np.uint64(0x9E3779B97F4A7C15)  # the base to the power k, wrapping
    k = 1
    while k <= max_k:
        ids = h.view(np.int64).copy()
        ids[max(0, n - k + 1) :] = NO_KGRAM
        yield k, ids
        shifted = np.zeros(n, dtype=np.uint64)
        shifted[: max(0, n - k)] = h[k:]
        with np.errstate(over="ignore"):
            h = h * mult + shifted
            mult = mult * mult
        k *= 2


class Period(msgspec.Struct, frozen=True):
    lag: int  # 0 when none was found
    match: float  # fraction of positions equal one lag later (on the common window)
    best_lag: int
    best_match: float
    reason: str = ""  # why there is no period
    smallest: int = 0  # the smallest lag within the margin, even when it is too short to be a step


def _fast_length(n: int) -> int:
    """The smallest 2^a 3^b 5^c ≥ n (an FFT length pocketfft handles fast; up to 1.6x shorter than
    the next power of two)."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _estimated_match(tokens: np.ndarray, max_lag: int) -> np.ndarray:
    """Estimated fraction of positions i with tokens[i] == tokens[i + lag], for lags 0..max_lag:
    each token becomes random unit phases, whose autocorrelation (FFT) sums 1 per equal pair and
    noise around 0 for unequal ones."""
    n = tokens.size
    _, inv = distinct_codes(tokens)
    rng = np.random.default_rng(0)
    phases = np.exp(2j * np.pi * rng.random((int(inv.max()) + 1, EMBED_DIMS))).astype(np.complex64)
    z = phases[inv]
    size = _fast_length(2 * n)
    f = np.fft.fft(z, n=size, axis=0)
    ac = np.fft.ifft(f * np.conj(f), axis=0)[: max_lag + 1]
    return ac.real.sum(axis=1) / EMBED_DIMS / (n - np.arange(max_lag + 1))


def _small_codes(tokens: np.ndarray) -> np.ndarray:
    """The tokens as the narrowest integers that keep them apart (their index among the distinct
    tokens, in the same order): comparing int16 instead of int64 reads a quarter of the memory, for the
    same counts; the codes of these codes are themselves, so the FFT estimate is unchanged."""
    uniq, inv = distinct_codes(tokens)
    for dtype in (np.int8, np.int16, np.int32):
        if uniq.size <= np.iinfo(dtype).max:
            return inv.astype(dtype)
    return inv


def find_period(tokens: np.ndarray) -> Period:
    """The step period of a token sequence (Period.lag 0 with a reason when there is none)."""
    t = np.asarray(tokens)[:MAX_TOKENS]
    n = t.size
    max_lag = n // MIN_REPEATS
    if max_lag < 1:
        return Period(0, 0.0, 0, 0.0, f"only {n} launches: too few to repeat {MIN_REPEATS} times")
    t = _small_codes(t)  # equal where the tokens are: the estimate and the exact counts read fewer bytes
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
    match = np.array([np.count_nonzero(t[:window] == t[lag : lag + window]) / window for lag in lags.tolist()])
    best = int(np.argmax(match))
    best_lag, best_match = int(lags[best]), float(match[best])
    if best_match < MIN_MATCH:
        return Period(0, 0.0, best_lag, best_match, f"no repeating launch sequence (the best lag, {best_lag} "
                      f"launches, repeats only {best_match:.0%} of them; {MIN_MATCH:.0%} needed)")
    limit = MISMATCH_SLACK * (1.0 - best_match) + MISMATCH_MARGIN
    # the period divides the best lag (which may be a multiple of it): a shorter lag that does not
    # is an inner repetition (the ops of a layer) that the step's other calls break
    k = np.maximum(np.rint(best_lag / lags), 1)
    divides = np.abs(best_lag - k * lags) <= max(1, best_lag // DIVIDES_TOLERANCE)
    ok = np.flatnonzero((1.0 - match <= limit) & divides)
    lag = int(lags[ok[0]])
    if lag < MIN_PERIOD:
        return Period(0, 0.0, best_lag, best_match,
                      "the launch sequence is one operation repeated, with no recurring host pause to cut it by", lag)
    return Period(lag, float(match[ok[0]]), best_lag, best_match, smallest=lag)
