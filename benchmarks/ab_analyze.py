"""Alternate two checkouts' `tracelab analyze --json` on one trace, each run a child process, and print the
best and median CPU seconds (user + sys of the child) and wall seconds of each, then the load average:

    python benchmarks/ab_analyze.py TRACE CHECKOUT_A CHECKOUT_B [ROUNDS] [ANALYZE ARGS...]

CPU is the steadier figure on a shared machine; wall is what a user waits for."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def one_run(root: str, trace: str, extra: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `analyze --json` with the code of checkout `root`."""
    env = dict(os.environ, PYTHONPATH=root, TRACELAB_DB="/tmp/ab-store.db")
    t0, r0 = time.perf_counter(), os.times()
    proc = subprocess.run(
        [sys.executable, "-m", "tracelab.cli", "analyze", "--json", trace, *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root, check=False,
    )
    wall, r1 = time.perf_counter() - t0, os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{root}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    return (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system), wall


def main() -> None:
    trace, a, b = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    extra = sys.argv[5:]
    got: dict[str, list[tuple[float, float]]] = {a: [], b: []}
    for _ in range(rounds):
        for root in (a, b):
            got[root].append(one_run(root, trace, extra))
    for root, runs in got.items():
        cpu, wall = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
        print(f"{root}: cpu best {cpu[0]:.2f} med {statistics.median(cpu):.2f}  "
              f"wall best {wall[0]:.2f} med {statistics.median(wall):.2f}")
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
