"""The torch.profiler backend: a Python script, or every rank of a torchrun launch, run under tracelab's
profiler wrapper (`tracelab.workloads.torchwrap`) into a run directory."""

from __future__ import annotations

import sys
from pathlib import Path

from .process import check_gpu, fresh_dir, run_logged, safe_name
from .torchrun import python_script, torchrun_split


def record_torch(cmd: list[str], out_dir: Path) -> tuple[Path, str]:
    """Profile a Python script (`python script.py ...`, `script.py ...`) or a torchrun launch under
    torch.profiler into a fresh run directory (`cmd-SCRIPT-torch`). Returns the directory and its trace:
    `trace.json.gz`, or `ranks` (one trace per rank) for a launch of several processes."""
    launch = torchrun_split(cmd)
    script = launch.program if launch is not None else python_script(cmd)
    check_gpu()
    run_dir = fresh_dir(out_dir / f"cmd-{safe_name(Path(script[0]).stem)}-torch")
    run_dir.mkdir(parents=True)
    if launch is not None:  # one profiler per rank, each rank's trace in run_dir/ranks
        run_logged(launch.wrapped(run_dir), run_dir, None)
    else:
        run_logged([sys.executable, "-m", "tracelab.workloads.torchwrap", "--out", str(run_dir), "--", *script],
                   run_dir, None)
    return run_dir, "ranks" if (run_dir / "ranks").is_dir() else "trace.json.gz"
