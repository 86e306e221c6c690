"""Running a profiled program: the backends' names, the checks before anything runs (backend, GPU, one
GPU per process), the program's environment, a fresh run directory, the logged subprocess, and the GPU's
name from nvidia-smi for meta.json."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import BadInput, MissingDependency, TracelabError

BACKENDS = ("nsys", "torch")


class RecordError(TracelabError):
    """The profiled program failed; the message names the run directory's log."""


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r} (choose from: {', '.join(BACKENDS)})")


def check_gpu() -> None:
    """MissingDependency unless torch is importable and sees a CUDA GPU."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        raise MissingDependency(
            f"recording needs PyTorch with CUDA (pip install 'tracelab[record]'): {e}"
        ) from None
    if not torch.cuda.is_available():
        raise MissingDependency(
            "recording needs a CUDA GPU: torch.cuda.is_available() is False on this machine"
        )


def gpu_count() -> int:
    """GPUs visible to this process (nvidia-smi -L; 0 when it is missing)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def check_world(name: str, world_size: int, params: Mapping[str, Any], gpus: int | None = None) -> None:
    """A workload of several processes needs one GPU per process for NCCL (gloo shares one GPU)."""
    if world_size <= 1 or str(params.get("dist_backend", "nccl")) != "nccl":
        return
    have = gpu_count() if gpus is None else gpus
    if have < world_size:
        raise BadInput(
            f"workload {name!r} runs {world_size} processes, one per GPU, but {have} GPU(s) are visible; "
            "`--param dist_backend=gloo` runs it on one GPU without NCCL kernels"
        )


def program_env(run_dir: Path | None = None) -> dict[str, str]:
    """The profiled program's environment: this tracelab first on PYTHONPATH, the run directory named,
    NVLink multicast off."""
    env = dict(os.environ)
    if run_dir is not None:
        env["TRACELAB_RUN_DIR"] = str(run_dir)  # a program may leave program_meta.json there
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # NVLink multicast stays off in every recorded program and its children (shared GPUs)
    env.update(
        {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    )
    return env


def fresh_dir(path: Path) -> Path:
    """`path`, or beside it a name with a time stamp when it exists."""
    if not path.exists():
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        cand = path.with_name(f"{path.name}-{stamp}" + (f"-{i}" if i else ""))
        if not cand.exists():
            return cand
    raise BadInput("cannot find a free run directory name", path)


def run_logged(cmd: list[str], run_dir: Path, timeout: float | None) -> None:
    """Run `cmd` with its output in run_dir/record.log; RecordError (naming the log) when it fails."""
    log = run_dir / "record.log"
    with open(log, "wb") as fh:
        fh.write((" ".join(cmd) + "\n").encode())
        fh.flush()
        try:
            rc = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env=program_env(run_dir), timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            raise RecordError(f"{run_dir}: timed out after {timeout} s (log: {log})") from None
    if rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        last = tail[-1] if tail else "no output"
        raise RecordError(f"{run_dir}: recording failed with exit code {rc}: {last[:300]} (log: {log})")


def gpu_from_smi() -> dict[str, Any]:
    """GPU name and driver from nvidia-smi (for runs of arbitrary programs); {} when unavailable."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    first = out.strip().splitlines()[0] if out.strip() else ""
    name, _, driver = first.partition(",")
    return {"name": name.strip(), "driver": driver.strip()} if name else {}


def safe_name(name: str) -> str:
    """`name` as a piece of a directory name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "cmd"

