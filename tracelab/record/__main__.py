"""`python -m tracelab.record`: record built-in workloads on the device (the user-facing command is
`tracelab record`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import TracelabError
from .process import BACKENDS
from .workload import record_workload


def main(argv: list[str] | None = None) -> int:
    """`python -m tracelab.record WORKLOAD [--variant V|all] [--backend nsys|torch|both] [--quick]
    [--out DIR]` (the device-side entry point; `tracelab record` is the user-facing one)."""
    ap = argparse.ArgumentParser(prog="python -m tracelab.record")
    ap.add_argument("workload")
    ap.add_argument("--variant", default="all")
    ap.add_argument("--backend", default="nsys", choices=[*BACKENDS, "both"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--param", action="append", default=[])
    a = ap.parse_args(argv)
    params = dict(kv.split("=", 1) for kv in a.param)
    rc = 0
    for backend in BACKENDS if a.backend == "both" else (a.backend,):
        try:
            for run in record_workload(a.workload, a.variant, backend, a.quick, a.out, params=params):
                print(run)
        except TracelabError as e:
            print(f"error: {e}", file=sys.stderr)
            rc = max(rc, e.exit_code)
    return rc


if __name__ == "__main__":
    sys.exit(main())
