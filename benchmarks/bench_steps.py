"""Step inference without markers: CPU time and peak memory of `infer_steps`, side by side with the
previous implementation (`tracelab/analyses/steps/infer.py` at --peer-ref, read with `git show`) in the
same run, on
- every bundled demo run (the largest, and all of them together),
- a corpus trace (default: hta/df_index_resolver, 123k events, 5 ProfilerSteps, the largest corpus
  trace with markers) and the same trace tiled N times in memory (each copy shifted after the last,
  correlation ids offset) to show how the time grows with the trace.

    python benchmarks/bench_steps.py [--corpus ../shared/corpus] [--tile 1 4 16] [--peer-ref 3233203]

CPU time is process time (user + sys) of the best of --repeats runs; memory is the peak of the
allocations traced by tracemalloc during one run (numpy reports its buffers there). Also prints how
many steps each version found.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracelab.analyses.steps.infer import infer_steps
from tracelab.demo import demo_run_paths
from tracelab.io import load_trace
from tracelab.io.detect import load_run_dir
from tracelab.model import Timeline

Infer = Callable[[Timeline, int], tuple[np.ndarray, np.ndarray, str]]


def peer_infer(ref: str) -> Infer | None:
    """`infer_steps` of tracelab/analyses/steps/infer.py at git ref `ref`, loaded as a module of this
    package (its relative imports resolve here)."""
    try:
        src = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:tracelab/analyses/steps/infer.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"no peer: git show {ref} failed ({e})")
        return None
    with tempfile.TemporaryDirectory(prefix="bench_steps_") as tmp:
        path = Path(tmp) / "steps_peer.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location("tracelab.analyses._steps_peer", path)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)  # the module lives on in memory; its file goes with the directory
    return mod.infer_steps


def measure(fn: Infer, tl: Timeline, rank: int, repeats: int) -> tuple[float, int, int]:
    """(best CPU seconds, peak traced bytes, steps found)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        s, _, _ = fn(tl, rank)
        best = min(best, time.process_time() - t0)
    tracemalloc.start()
    fn(tl, rank)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak, int(s.size)


def tiled(tl: Timeline, copies: int) -> Timeline:
    """The trace repeated `copies` times back to back (times shifted, correlation ids offset)."""
    if copies == 1:
        return tl
    ev = tl.events
    span = int(ev["end"].max() - ev["start"].min()) + 1_000_000
    corr_span = int(ev["correlation"].max()) + 1
    parts = []
    for i in range(copies):
        part = ev.copy()
        part["start"] += i * span
        part["end"] += i * span
        c = part["correlation"].to_numpy()
        part["correlation"] = np.where(c >= 0, c + i * corr_span, c)
        parts.append(part)
    return replace(tl, events=pd.concat(parts, ignore_index=True))


def rank_of(tl: Timeline) -> int:
    return int(np.unique(tl.events["rank"].to_numpy())[0])


def row(label: str, events: int, new: tuple[float, int, int], old: tuple[float, int, int] | None) -> None:
    t, m, n = new
    line = f"{label:<44} {events:>9,} ev {t * 1e3:>8.1f} ms {events / max(t, 1e-9) / 1e6:>6.2f} Mev/s {m / 2**20:>7.1f} MiB {n:>5} steps"
    if old is not None:
        to, mo, no = old
        line += f" | previous {to * 1e3:>8.1f} ms {mo / 2**20:>7.1f} MiB {no:>5} steps | time ×{t / max(to, 1e-9):.2f}"
    print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpus"))
    ap.add_argument("--trace", default="hta/df_index_resolver__df_index_resolver.json.gz")
    ap.add_argument("--tile", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer-ref", default="3233203", help="git ref of the previous implementation")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    peer = peer_infer(args.peer_ref)

    demos = [(p.name.rsplit("-", 1)[0], load_run_dir(p)) for p in demo_run_paths()]
    total_new = [0.0, 0, 0]
    total_old = [0.0, 0, 0]
    largest = max(demos, key=lambda d: len(d[1].events))
    for name, tl in demos:
        new = measure(infer_steps, tl, rank_of(tl), args.repeats)
        old = measure(peer, tl, rank_of(tl), args.repeats) if peer else None
        total_new = [total_new[0] + new[0], max(total_new[1], new[1]), total_new[2] + new[2]]
        if old:
            total_old = [total_old[0] + old[0], max(total_old[1], old[1]), total_old[2] + old[2]]
        if name == largest[0]:
            row(f"largest demo run: {name}", len(tl.events), new, old)
    events = sum(len(tl.events) for _, tl in demos)
    row(f"all {len(demos)} demo runs", events, tuple(total_new), tuple(total_old) if peer else None)  # type: ignore[arg-type]

    path = Path(args.corpus) / args.trace
    if not path.exists():
        print(f"corpus trace {path} not found: skipped")
        return
    base = load_trace(path)
    for n in args.tile:
        tl = tiled(base, n)
        r = rank_of(tl)
        reps = args.repeats if n <= 4 else 1
        new = measure(infer_steps, tl, r, reps)
        old = measure(peer, tl, r, reps) if peer else None
        row(f"{args.trace.split('/')[-1][:30]} ×{n}", len(tl.events), new, old)


if __name__ == "__main__":
    main()
