"""The one validation layer between the parsers and the model.

Every parser hands its column arrays to `validate_columns` just before `build_timeline`. It checks the
ranges the model and the analyses rely on, so that no later arithmetic can overflow and no value is
wrapped or cast silently:

- times: every start and end lies in (-TIME_LIMIT_NS, TIME_LIMIT_NS), so the difference of any two
  times fits in int64; events outside are dropped;
- durations: end >= start and end - start <= DURATION_LIMIT_NS; the sum of all durations stays below
  TOTAL_DURATION_LIMIT_NS, so every sum of event lengths (busy time, per-kernel totals) fits in int64;
- ids stored as int32 (device, rank) must fit: GPU events on a device id outside [0, 2^31) are dropped,
  a rank outside [0, 2^31) rejects the file; launch attributes stored as int32 (grid, block, registers)
  that do not fit become -1 (unknown).

What is dropped or made unknown is counted in the returned notes, with an example, in words. Kineto's
float microseconds are checked before they become integers (`us_to_ns_checked`), since the conversion
itself is where 1e19 µs would wrap.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec
import numpy as np

from tracelab.errors import TraceFormatError
from tracelab.model import DeviceInfo
from tracelab.model.grouping import any_of
from tracelab.model.kinds import GPU_ACTIVITY_KINDS

TIME_LIMIT_NS = 1 << 62  # |time| below this (year 2116 on an epoch clock): differences fit in int64
DURATION_LIMIT_NS = 1 << 53  # one event lasts at most ~104 days
TOTAL_DURATION_LIMIT_NS = 1 << 62  # the sum of all event durations
INT32_LIMIT = 1 << 31
TIME_LIMIT_US = TIME_LIMIT_NS / 1000.0
DURATION_LIMIT_US = DURATION_LIMIT_NS / 1000.0
MAX_NAME_CHARS = 1 << 20  # a name longer than 1 MiB of text is cut (with a note)

_GPU = [int(k) for k in GPU_ACTIVITY_KINDS]
_INT32_ATTRS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers")


def us_to_ns_checked(ts_us: np.ndarray, dur_us: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start_ns, end_ns, ok) from float µs. `ok` is False where ts is not finite or outside the time
    range, or dur is not finite, negative or longer than the duration limit; those rows hold 0."""
    ts_us = np.asarray(ts_us, dtype=np.float64)
    dur_us = np.asarray(dur_us, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(ts_us) & (np.abs(ts_us) < TIME_LIMIT_US)
        ok &= np.isfinite(dur_us) & (dur_us >= 0) & (dur_us <= DURATION_LIMIT_US)
    ts = np.where(ok, ts_us, 0.0)
    dur = np.where(ok, dur_us, 0.0)
    whole = np.floor(ts)
    start = whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64)
    end = start + np.rint(dur * 1000).astype(np.int64)
    return start, end, ok


def _example(strings: Sequence[str], names: np.ndarray | None, rows: np.ndarray, what: str) -> str:
    if names is None or not len(rows):
        return what
    sid = int(names[rows[0]])
    label = strings[sid] if 0 <= sid < len(strings) else ""
    label = label if len(label) <= 60 else label[:28] + "…" + label[-28:]
    return f"{what}, e.g. {label!r}" if label else what


def _take(cols: dict[str, np.ndarray], keep: np.ndarray, n: int) -> dict[str, np.ndarray]:
    out = {}
    for k, v in cols.items():
        arr = np.asarray(v)
        out[k] = arr[keep] if arr.ndim >= 1 and len(arr) == n else v
    return out


def validate_columns(
    cols: dict[str, np.ndarray],
    strings: Sequence[str],
    path: object,
    *,
    min_time_ns: int | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Check the event columns a parser built (see the module docstring). Returns the columns (rows
    dropped where needed) and notes saying what was dropped or made unknown. Raises TraceFormatError
    (one line naming `path`) when the file as a whole is unusable."""
    notes: list[str] = []
    start = np.asarray(cols["start"])
    n = len(start)
    if n == 0:
        return cols, notes
    end = np.asarray(cols.get("end", start))
    if start.dtype.kind != "i" or end.dtype.kind != "i":
        raise TypeError("validate_columns needs integer start/end columns")
    names = cols.get("name")
    names = np.asarray(names) if names is not None and np.ndim(names) else None
    kind = np.asarray(cols["kind"]) if "kind" in cols and np.ndim(cols["kind"]) else None

    lo = -TIME_LIMIT_NS + 1 if min_time_ns is None else max(-TIME_LIMIT_NS + 1, min_time_ns)
    bad_time, bad_len, length = _time_checks(start, end, lo)
    drop = bad_time | bad_len
    if bad_time.any():
        rows = np.flatnonzero(bad_time)
        what = (
            f"{len(rows)} events with a time outside the valid range "
            f"({'0' if min_time_ns is not None and min_time_ns >= 0 else '±2^62 ns'}"
            f"{' … 2^62 ns' if min_time_ns is not None and min_time_ns >= 0 else ''}; "
            f"first: start {int(start[rows[0]])} ns) were dropped"
        )
        notes.append(_example(strings, names, rows, what))
    if bad_len.any():
        rows = np.flatnonzero(bad_len)
        what = (
            f"{len(rows)} events with an impossible duration (negative or over 2^53 ns; first: "
            f"{int(length[rows[0]])} ns) were dropped"
        )
        notes.append(_example(strings, names, rows, what))

    drop |= _bad_devices(cols, kind, drop, strings, names, notes)
    if "rank" in cols and np.ndim(cols["rank"]):
        rank = np.asarray(cols["rank"])
        bad = (rank < 0) | (rank >= INT32_LIMIT)
        if bad.any():
            raise TraceFormatError(f"rank {int(rank[np.flatnonzero(bad)[0]])} is outside 0 … 2^31-1", path)

    if drop.any():
        keep = np.flatnonzero(~drop)
        cols = _take(cols, keep, n)
        length = length[keep]
        n = len(keep)

    total = float(np.sum(length, dtype=np.float64))
    # a float sum, with a margin far larger than its rounding error: the exact sum is below the limit
    if total >= TOTAL_DURATION_LIMIT_NS * (1 - 2**-20):
        raise TraceFormatError(
            f"event durations add up to {total:.3g} ns, more than tracelab can sum exactly (2^62 ns)", path
        )

    _unknown_out_of_int32(cols, notes)
    return cols, notes


def _time_checks(start: np.ndarray, end: np.ndarray, lo: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a time outside lo … 2^62, an impossible duration, each row's duration: 0 where its time is bad).
    When the columns' extremes are in range (every real trace), four reductions and one subtraction
    say so without the dozen full-column masks the row-by-row test makes."""
    n = len(start)
    if (int(start.min()) >= lo and int(start.max()) < TIME_LIMIT_NS and int(end.min()) > -TIME_LIMIT_NS
            and int(end.max()) < TIME_LIMIT_NS):
        length = end - start  # both in range: no overflow
        if int(length.min()) >= 0 and int(length.max()) <= DURATION_LIMIT_NS:
            return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), length
    bad_time = (start < lo) | (start >= TIME_LIMIT_NS) | (end <= -TIME_LIMIT_NS) | (end >= TIME_LIMIT_NS)
    # end - start can only overflow when the times are out of range, which bad_time already catches
    with np.errstate(over="ignore"):
        length = np.where(bad_time, 0, end - start)
    bad_len = ~bad_time & ((length < 0) | (length > DURATION_LIMIT_NS))
    return bad_time, bad_len, length


def _bad_devices(
    cols: dict[str, np.ndarray],
    kind: np.ndarray | None,
    drop: np.ndarray,
    strings: Sequence[str],
    names: np.ndarray | None,
    notes: list[str],
) -> np.ndarray | bool:
    """The rows (not dropped already) on a device id outside 0 … 2^31-1, said in `notes`."""
    if "device" not in cols or not np.ndim(cols["device"]):
        return False
    device = np.asarray(cols["device"])
    bad_dev = (device < -1) | (device >= INT32_LIMIT)
    if kind is not None and bad_dev.any():  # (no kind mask over every row when no device id is bad)
        bad_dev &= any_of(kind, _GPU) | (device != -1)
    bad_dev &= ~drop
    if bad_dev.any():
        rows = np.flatnonzero(bad_dev)
        what = (
            f"{len(rows)} events on a device id outside 0 … 2^31-1 (first: {int(device[rows[0]])}) "
            "were dropped"
        )
        notes.append(_example(strings, names, rows, what))
    return bad_dev


def _unknown_out_of_int32(cols: dict[str, np.ndarray], notes: list[str]) -> None:
    """Attributes outside the int32 range become unknown (-1), said in `notes`."""
    for c in _INT32_ATTRS:
        if c not in cols or not np.ndim(cols[c]):
            continue
        arr = np.asarray(cols[c])
        if not arr.size or (int(arr.min()) >= -1 and int(arr.max()) < INT32_LIMIT):
            continue  # all in range (e.g. already int32 without values below -1)
        bad = (arr < -1) | (arr >= INT32_LIMIT)
        if bad.any():
            rows = np.flatnonzero(bad)
            notes.append(
                f"{len(rows)} {c} values outside the int32 range (first: {int(arr[rows[0]])}) "
                "were treated as unknown"
            )
            cols[c] = np.where(bad, -1, arr)


_DEVICE_INT_LIMIT = {"total_memory": 1 << 63}


def check_devices(devices: Sequence[DeviceInfo]) -> tuple[list[DeviceInfo], list[str]]:
    """DeviceInfo fields outside their range (SM counts and limits in [0, 2^31), memory in [0, 2^63))
    become 0 (unknown), with a note; device names lose bidi controls and are cut at 256 characters."""
    out: list[DeviceInfo] = []
    notes: list[str] = []
    for d in devices:
        changes: dict[str, object] = {}
        if _BIDI_RE.search(d.name) or len(d.name) > 256:
            changes["name"] = _BIDI_RE.sub("\ufffd", d.name)[:256]
        for f in d.__struct_fields__:
            if f in ("rank", "device", "name"):
                continue
            v = getattr(d, f)
            if isinstance(v, bool) or not isinstance(v, int):
                changes[f] = 0 if f != "warp_size" else 32
                continue
            if not 0 <= v < _DEVICE_INT_LIMIT.get(f, INT32_LIMIT):
                changes[f] = 0 if f != "warp_size" else 32
        if set(changes) - {"name"}:
            notes.append(
                f"device {d.device} of rank {d.rank}: out-of-range properties treated as unknown "
                f"({', '.join(sorted(set(changes) - {'name'}))})"
            )
        if changes:
            d = msgspec.structs.replace(d, **changes)
        out.append(d)
    return out, notes


def check_rank(value: object, path: object, what: str = "distributedInfo.rank") -> int | None:
    """An integer rank in [0, 2^31) (None when absent); anything else rejects the file."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{what} is not an integer ({str(value)[:40]!r})", path)
    if not 0 <= value < INT32_LIMIT:
        raise TraceFormatError(f"{what} {value} is outside 0 … 2^31-1", path)
    return value


def neutralize_names(strings: Sequence[str]) -> tuple[tuple[str, ...], int]:
    """Strings with Unicode bidi controls (U+202A…U+202E, U+2066…U+2069, U+200E/F, U+061C) replaced by
    U+FFFD and names longer than MAX_NAME_CHARS cut, so no report shows text in a different order than
    stored. Returns the table and the number of names changed."""
    changed = 0
    out = []
    for s in strings:
        t = s
        if not t.isascii() and _BIDI_RE.search(t):  # isascii: C speed, and no bidi control is ASCII
            t = _BIDI_RE.sub("\ufffd", t)
        if len(t) > MAX_NAME_CHARS:
            t = t[: MAX_NAME_CHARS // 2] + "…" + t[-MAX_NAME_CHARS // 2 :]
        if t is not s:
            changed += 1
        out.append(t)
    return tuple(out), changed


_BIDI_RE = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def json_safe(value: object, depth: int = 0) -> object:
    """Metadata copied from a trace (distributedInfo, baseTimeNanoseconds, ...) in a form every JSON
    writer accepts: integers outside int64 become strings, nesting deeper than 32 levels and strings
    over 64 KiB are cut."""
    if depth > 32:
        return "…"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 63) else str(value)
    if isinstance(value, str):
        v = _BIDI_RE.sub("\ufffd", value)
        return v if len(v) <= 65536 else v[:65536] + "…"
    if isinstance(value, dict):
        return {str(k)[:256]: json_safe(v, depth + 1) for k, v in list(value.items())[:10_000]}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in list(value)[:10_000]]
    return str(value)[:256]


LAUNCH_SKEW_LIMIT_NS = 1_000_000_000  # GPU work starting this long before its launch: clocks disagree


def launch_link_notes(
    kind: np.ndarray,
    start: np.ndarray,
    corr: np.ndarray,
    flags: np.ndarray,
    names: np.ndarray,
    strings: Sequence[str],
) -> list[str]:
    """Notes on correlation links that cannot be right, which would change every gap's cause: host calls
    sharing one correlation id, GPU work linked to a host call that launches nothing (cudaEventQuery,
    cuProfilerStart), and GPU work starting more than LAUNCH_SKEW_LIMIT_NS before the call that launched
    it (a GPU clock years off). Vectorized: one sort of the host calls' ids, one search per GPU row."""
    from tracelab.model.kinds import HOST_API_KINDS, Flag

    api_rows = np.flatnonzero(any_of(kind, HOST_API_KINDS) & (corr > 0))
    gpu_rows = np.flatnonzero(any_of(kind, _GPU) & (corr > 0))
    if not len(api_rows) or not len(gpu_rows):
        return []
    notes: list[str] = []
    # by id, and for an id that several calls carry, a launch first (the GPU work is linked to it)
    order = np.lexsort(((flags[api_rows] & Flag.LAUNCH) == 0, corr[api_rows]))
    api_rows = api_rows[order]
    sc = corr[api_rows]
    same = sc[1:] == sc[:-1]
    if same.any():
        shared = np.unique(sc[1:][same])
        notes.append(
            f"{len(shared):,} correlation ids are carried by more than one host call (e.g. id {int(shared[0])}): "
            "the launch of their GPU work is ambiguous, so those gaps' causes are doubtful"
        )
    pos = np.minimum(np.searchsorted(sc, corr[gpu_rows]), len(sc) - 1)
    hit = sc[pos] == corr[gpu_rows]
    g = gpu_rows[hit]
    launch = api_rows[pos[hit]]
    bad = (flags[launch] & Flag.LAUNCH) == 0
    if bad.any():
        first = int(launch[np.flatnonzero(bad)[0]])
        sid = int(names[first])
        example = strings[sid][:60] if 0 <= sid < len(strings) else "?"
        notes.append(
            f"{int(bad.sum()):,} GPU events are linked by correlation id to a host call that launches no GPU work "
            f"(e.g. {example!r}): their launch is unknown, so those gaps' causes are doubtful"
        )
    early = start[launch] - start[g]
    skew = early > LAUNCH_SKEW_LIMIT_NS
    if skew.any():
        worst = int(early[skew].max())
        notes.append(
            f"{int(skew.sum()):,} GPU events start more than {LAUNCH_SKEW_LIMIT_NS / 1e9:g} s before the host call "
            f"that launched them (up to {worst / 1e9:,.0f} s): host and GPU clocks disagree, so launch delays and "
            "gaps' causes are doubtful"
        )
    return notes
