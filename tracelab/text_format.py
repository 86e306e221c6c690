"""The one formatter: durations, time offsets, byte counts, percentages and counts as text.

Every human output (CLI, Markdown and HTML reports, dashboard, finding and gap evidence) formats its
numbers here, so the same figure reads the same everywhere:

- durations: `850 ns`, `12.3 µs`, `4.56 ms`, `1.234 s` (unit picked after rounding: 999.96 µs is
  `1.00 ms`, never `1000.0 µs`);
- points in time: offsets from ONE origin, the run start (the first event of any kind, what the store
  records as the run's `start_ns`), written `+5.07 ms` (`tracelab.render.format.run_origin` finds it);
- deltas: `+1.20 ms`, `-628.8 µs`, `0`; percentages `45.0%`, changes `+17.5%`, points `-7.6 pt`;
- bytes: `512 B`, `1.5 KiB`, `3.0 MiB`.

This module imports nothing from tracelab: it sits below the analyses, so every layer uses it (the
analyses' evidence strings and the rules' prose as well as the renderers). The run origin of an
analysis is found by `tracelab.render.format.run_origin`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = [
    "fmt_bytes",
    "fmt_count",
    "fmt_fraction",
    "fmt_ns",
    "fmt_ns_many",
    "fmt_offset",
    "fmt_pct",
    "fmt_points",
    "fmt_ranks",
    "fmt_ratio",
    "fmt_rel",
    "fmt_rel_many",
    "fmt_share",
    "fmt_signed_count",
    "fmt_signed_ns",
    ]

_UNITS = ("ns", "µs", "ms", "s")
_DIVISORS = np.array([1.0, 1e3, 1e6, 1e9])
_SCALAR_DIVISORS = (1.0, 1e3, 1e6, 1e9)
_DECIMALS = (0, 1, 2, 3)  # 850 ns, 12.3 µs, 4.56 ms, 1.234 s


def _unit_of(a: np.ndarray) -> np.ndarray:
    """Unit index per absolute duration, chosen on the value as it will be printed (after rounding)."""
    unit = np.zeros(a.shape, dtype=np.int64)
    for u in (1, 2, 3):  # move up while the rounded value in the current unit reaches 1000
        rounded = np.round(a / _DIVISORS[u - 1], _DECIMALS[u - 1])
        unit = np.where((unit == u - 1) & (rounded >= 1000.0), u, unit)
    return unit


def fmt_ns(ns: float | None) -> str:
    """A duration in its most readable unit: 850 ns, 12.3 µs, 4.56 ms, 1.234 s; '-' when unknown."""
    if ns is None:
        return "-"
    v = float(ns)
    if not np.isfinite(v):
        return "-"
    a, u = abs(v), 0
    while u < 3 and round(a / _SCALAR_DIVISORS[u], _DECIMALS[u]) >= 1000.0:  # the unit it prints in
        u += 1
    return f"{v / _SCALAR_DIVISORS[u]:.{_DECIMALS[u]}f} {_UNITS[u]}"


def fmt_ns_many(ns: Iterable[float] | np.ndarray, *, signed: bool = False) -> list[str]:
    """`fmt_ns` (or `fmt_rel` with signed) for a whole array: one vectorized unit choice, then one
    format call per element (for hover text and tables of drawn items)."""
    arr = np.asarray(ns, dtype=np.float64).ravel()
    a = np.abs(arr)
    unit = _unit_of(a)
    scaled = (a if signed else arr) / _DIVISORS[unit]
    fmts = [f"{{}}{{:.{d}f}} {name}".format for d, name in zip(_DECIMALS, _UNITS)]
    signs = np.where(arr < 0, "-", "+").tolist() if signed else [""] * arr.size
    return [fmts[u](s, v) for u, s, v in zip(unit.tolist(), signs, scaled.tolist())]


def fmt_rel(ns: float) -> str:
    """A time relative to a reference, always with its sign: +12.3 µs, -1.20 ms, +0 ns."""
    return ("-" if ns < 0 else "+") + fmt_ns(abs(ns))


def fmt_rel_many(ns: Iterable[float] | np.ndarray) -> list[str]:
    """`fmt_rel` for a whole array."""
    return fmt_ns_many(ns, signed=True)


def fmt_offset(t_ns: int, origin_ns: int) -> str:
    """A point in time as an offset from the run origin: +5.07 ms."""
    return fmt_rel(int(t_ns) - int(origin_ns))


def fmt_signed_ns(ns: float) -> str:
    """A difference of durations: +1.20 ms, -628.8 µs, and a plain 0 for no change."""
    return fmt_rel(ns) if ns else "0"


def fmt_bytes(b: float) -> str:
    """A byte count: 512 B, 1.5 KiB, 3.0 MiB, 2.0 GiB; '' for a negative (unknown) count."""
    b = float(b)
    if b < 0:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} GiB"  # pragma: no cover (loop returns)


def fmt_fraction(x: float) -> str:
    """A fraction (0..1) as a percentage: 45.0%."""
    return f"{100.0 * x:.1f}%"


def fmt_share(part: float, whole: float) -> str:
    """part / whole as a percentage, '-' when whole is 0."""
    return fmt_fraction(part / whole) if whole else "-"


def fmt_pct(pct: float | None) -> str:
    """A relative change already in percent, signed: +17.5%; '0.0%' for a change that rounds to nothing
    (never '-0.0%' or '+0.0%'); 'n/a' when undefined."""
    if pct is None:
        return "n/a"
    return "0.0%" if round(float(pct), 1) == 0 else f"{pct:+.1f}%"


def fmt_points(delta_fraction: float) -> str:
    """A difference of two fractions in percentage points: -7.6 pt."""
    return f"{100.0 * delta_fraction:+.1f} pt"


def fmt_ratio(a: float, b: float) -> str:
    """b / a: 1.23x; 'n/a' when a is 0."""
    return f"{b / a:.2f}x" if a else "n/a"


def fmt_signed_count(n: int) -> str:
    """A difference of counts: +2, -1,018, and a plain 0 for no change (as `fmt_signed_ns`)."""
    return f"{int(n):+,d}" if n else "0"


def fmt_count(n: int, word: str | None = None) -> str:
    """1,234 (and '1,234 kernels' / '1 kernel' with a word)."""
    if word is None:
        return f"{int(n):,}"
    return f"{int(n):,} {word}{'' if n == 1 else 's'}"


def fmt_ranks(ranks: Iterable[int]) -> str:
    """Which ranks a run has, never readable as a count: 'rank 0', 'ranks 0, 1', '8 ranks (0-7)', 'no rank'."""
    rs = sorted({int(r) for r in ranks})
    if not rs:
        return "no rank"
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) > 4 and rs[-1] - rs[0] == len(rs) - 1:
        return f"{len(rs)} ranks ({rs[0]}-{rs[-1]})"
    return "ranks " + ", ".join(map(str, rs))
