"""Run a Python program under torch.profiler:
`python -m tracelab.workloads.torchwrap --out DIR [--module] -- script.py|module [args]`.

Used by `tracelab record --backend torch -- python script.py` and, one process per rank, by
`tracelab record --backend torch -- torchrun ... script.py` (record.torchrun_command puts this module
between torchrun and the program). A plain process writes DIR/trace.json.gz and meta.json; a rank of
a multi-process job (WORLD_SIZE > 1) writes DIR/ranks/rank<R>.json.gz and DIR/meta_rank<R>.json, and
rank 0 writes meta.json naming the ranks directory.
"""

from __future__ import annotations

import gzip
import json
import os
import runpy
import shutil
import sys
import time
from pathlib import Path

USAGE = "usage: python -m tracelab.workloads.torchwrap --out DIR [--module] -- script.py|module [args]"


def _parse(argv: list[str]) -> tuple[Path, bool, list[str]] | None:
    if len(argv) < 4 or argv[0] != "--out":
        return None
    out, rest = Path(argv[1]), argv[2:]
    module = bool(rest) and rest[0] == "--module"
    if module:
        rest = rest[1:]
    if not rest or rest[0] != "--" or len(rest) < 2:
        return None
    return out, module, rest[1:]


def _rank() -> tuple[int, int]:
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def main(argv: list[str] | None = None) -> int:
    parsed = _parse(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    out, module, program = parsed
    import torch

    from .runner import TORCH_TRACE, _profiler, gpu_facts, select_rank_device

    rank, world = _rank()
    if world > 1 and torch.cuda.is_available():
        select_rank_device()  # the rank's own GPU before the profiler touches CUDA
    prof, note = _profiler()
    sys.argv = list(program)
    t0 = time.perf_counter()
    prof.start()
    try:
        if module:
            runpy.run_module(program[0], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(program[0], run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        torch.cuda.synchronize()
        prof.stop()
    wall = (time.perf_counter() - t0) * 1e3
    target = out if world <= 1 else out / "ranks"
    target.mkdir(parents=True, exist_ok=True)
    name = TORCH_TRACE if world <= 1 else f"rank{rank}.json.gz"
    tmp = target / (name[: -len(".gz")] + f".{os.getpid()}.tmp")
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.open(target / name, "wb") as dst:
        shutil.copyfileobj(src, dst)
    tmp.unlink()
    meta = {
        "tracelab_run": 1,
        "backend": "torch",
        "trace_file": TORCH_TRACE if world <= 1 else "ranks",
        "gpu": gpu_facts(),
        "loop_wall_ms": round(wall, 3),
        "profiler": {"tool": "torch.profiler", "sync_events": note},
    }
    if world > 1:
        meta["world_size"] = world
        (out / f"meta_rank{rank}.json").write_text(json.dumps({**meta, "rank": rank}, indent=1))
    if rank == 0:
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
