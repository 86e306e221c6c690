"""Numbers for people: durations (ns) and byte counts as short strings.

The one place these are formatted. It lives in analyses (evidence strings use it) so that
render and app, which may import analyses, use the same helpers.
"""

from __future__ import annotations

import numpy as np

# unit thresholds (upper bound, exclusive) and divisors: ns, µs, ms, s
_LIMITS = np.array([1_000, 1_000_000, 1_000_000_000])
_DIVISORS = (1.0, 1e3, 1e6, 1e9)
_NAMES = ("ns", "µs", "ms", "s")

# format specs for µs, ms and s (ns are always whole numbers)
FIXED = (".1f", ".2f", ".2f")  # 12.3 µs, 4.56 ms, 1.23 s (evidence strings, reports)
FIXED_MS3 = (".1f", ".2f", ".3f")  # ... 1.234 s (compare / terminal text)
SIG4 = (".4g", ".4g", ".4g")  # 4 significant digits (dashboard hover and tables)


def _unit(a: float) -> int:
    return int(np.searchsorted(_LIMITS, a, side="right"))


def fmt_ns(ns: float, specs: tuple[str, str, str] = FIXED) -> str:
    """A duration in its most readable unit: 850 ns, 12.3 µs, 1.25 ms, 2.50 s (specs: µs, ms, s)."""
    v = float(ns)
    u = _unit(abs(v))
    if u == 0:
        return f"{v:.0f} ns"
    return f"{v / _DIVISORS[u]:{specs[u - 1]}} {_NAMES[u]}"


def fmt_rel(ns: float) -> str:
    """A time relative to a reference, with its sign: +12.3 µs, -1.20 ms."""
    return ("-" if ns < 0 else "+") + fmt_ns(abs(ns))


def fmt_rel_many(ns: np.ndarray) -> list[str]:
    """fmt_rel for a whole array (one unit choice per element, vectorized)."""
    ns = np.asarray(ns, dtype=np.int64)
    a = np.abs(ns)
    unit = np.searchsorted(_LIMITS, a, side="right")
    scaled = a / np.array(_DIVISORS)[unit]
    specs = (".0f",) + FIXED
    fmts = [f"{{}}{{:{spec}}} {name}".format for spec, name in zip(specs, _NAMES)]
    signs = np.where(ns < 0, "-", "+").tolist()
    return [fmts[u](sg, v) for u, sg, v in zip(unit.tolist(), signs, scaled.tolist())]


def fmt_bytes(b: float) -> str:
    """A byte count: 512 B, 1.5 KiB, 3.0 MiB, 2.0 GiB; '' for a negative (unknown) count."""
    b = float(b)
    if b < 0:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} GiB"
