"""Run a Python script under torch.profiler: `python -m tracelab.workloads.torchwrap --out DIR -- script.py ...`.

Used by `tracelab record --backend torch -- python script.py`. Writes DIR/trace.json.gz and meta.json.
"""

from __future__ import annotations

import gzip
import json
import runpy
import shutil
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 4 or argv[0] != "--out" or argv[2] != "--":
        print("usage: python -m tracelab.workloads.torchwrap --out DIR -- script.py [args]", file=sys.stderr)
        return 2
    out, script = Path(argv[1]), argv[3:]
    import torch

    from .runner import TORCH_TRACE, _profiler, gpu_facts

    prof, note = _profiler()
    sys.argv = list(script)
    t0 = time.perf_counter()
    prof.start()
    try:
        runpy.run_path(script[0], run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        torch.cuda.synchronize()
        prof.stop()
    wall = (time.perf_counter() - t0) * 1e3
    tmp = out / "trace.json"
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.open(out / TORCH_TRACE, "wb") as dst:
        shutil.copyfileobj(src, dst)
    tmp.unlink()
    meta = {
        "tracelab_run": 1,
        "backend": "torch",
        "trace_file": TORCH_TRACE,
        "gpu": gpu_facts(),
        "loop_wall_ms": round(wall, 3),
        "profiler": {"tool": "torch.profiler", "sync_events": note},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
