#!/usr/bin/env bash
# The small mixed program (tests/data/programs/mixed_small.py) under nsys and under torch.profiler.
set -u
out=${1:?outdir}; mkdir -p "$out"
python3 - "$out" <<'PY'
import sys
from pathlib import Path
from tracelab.record.command import record_command
out = Path(sys.argv[1])
for backend in ("nsys", "torch"):
    try:
        print(backend, record_command(["python3", "tests/data/programs/mixed_small.py"], backend, out))
    except Exception as e:
        print(backend, "FAILED", e)
PY
