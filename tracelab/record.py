"""Record built-in workloads (or any program) under nsys or torch.profiler into run directories.

A run directory holds the raw trace (`trace.sqlite` + `trace.nsys-rep` for nsys, `trace.json.gz`
for torch.profiler), `meta.json` (workload, variant, backend, GPU, driver, versions, parameters,
wall time per step) and, for the workloads' instrumented kernels, `sm_probe.npz`
(tracelab/workloads/probes.py documents it). `tracelab.io.detect.load_run_dir` reads one.

Each variant runs in its own subprocess (`python -m tracelab.workloads.runner ...`); under nsys that
subprocess is the profiled program, under torch.profiler the runner starts the profiler itself.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BadInput, MissingDependency, TracelabError
from .workloads import get_workload

BACKENDS = ("nsys", "torch")
NSYS_TRACE = "cuda,nvtx,osrt"  # CUDA API + activity, NVTX ranges, OS runtime calls (OSRT_API)
NSYS_FLAGS = (
    "-t",
    NSYS_TRACE,
    "--sample=none",
    "--cpuctxsw=none",
    "--cuda-graph-trace=node",
    "--export=sqlite",
    "--force-overwrite=true",
)
NSYS_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
)


class RecordError(TracelabError):
    """The profiled program failed; the message names the run directory's log."""


def find_nsys() -> Path | None:
    """The nsys binary: engineer B's finder when present, else TRACELAB_NSYS, PATH, standard dirs."""
    try:
        from tracelab.io.nsys.load import find_nsys as _b_find
    except ImportError:  # the nsys parser is optional here
        _b_find = None
    found = _b_find() if _b_find is not None else None
    if found:
        return Path(found)
    env = os.environ.get("TRACELAB_NSYS")
    if env and Path(env).is_file():
        return Path(env)
    which = shutil.which("nsys")
    if which:
        return Path(which)
    for pattern in NSYS_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return Path(hits[-1])
    return None


# workloads open their measured window with cudaProfilerStart/Stop (warm-up and set-up stay out)
NSYS_WINDOW = ("--capture-range=cudaProfilerApi", "--capture-range-end=stop")
# For PyTorch programs: an NVTX range around every autograd operator (forward and backward), so that
# the host side between CUDA calls is visible in the nsys trace as it is in a torch.profiler trace
# (CPU ops). Without it the host shows only inside CUDA calls and Python time looks like "nothing".
NSYS_PYTORCH_HOST = "--pytorch=autograd-nvtx"
# a workload variant recorded with memory tracing (Variant.memory) under nsys: CUDA_GPU_MEMORY_USAGE_EVENTS
NSYS_MEMORY = "--cuda-memory-usage=true"


def nsys_command(
    nsys: str | Path,
    out_prefix: str | Path,
    cmd: Sequence[str],
    window: bool = False,
    extra: Sequence[str] = (),
    os_calls: bool = True,
) -> list[str]:
    """`nsys profile` with tracelab's flags (small traces: no CPU sampling, no context switches);
    `window`: record only between cudaProfilerStart and cudaProfilerStop; `extra`: more flags;
    `os_calls`: trace OS runtime calls (osrt: what tells "blocked in the OS" from "busy" in gap causes)."""
    flags = NSYS_FLAGS if os_calls else tuple("cuda,nvtx" if f == NSYS_TRACE else f for f in NSYS_FLAGS)
    return [
        str(nsys),
        "profile",
        *flags,
        *(NSYS_WINDOW if window else ()),
        *extra,
        "-o",
        str(out_prefix),
        *cmd,
    ]


def is_python_command(cmd: Sequence[str]) -> bool:
    """`python[3[.x]] ...`, `torchrun ...` or `script.py ...`."""
    return bool(cmd) and (
        Path(cmd[0]).name.startswith("python") or Path(cmd[0]).name == "torchrun" or str(cmd[0]).endswith(".py")
    )


def nsys_supports(nsys: str | Path, option: str) -> bool:
    """Whether `nsys profile --help` lists `option` (e.g. "--pytorch"); False when it cannot run."""
    try:
        out = subprocess.run(
            [str(nsys), "profile", "--help"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return option in (out.stdout + out.stderr)


def pytorch_host_flags(nsys: str | Path, cmd: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The nsys flags that make a PyTorch program's host side visible, and a note saying what was
    done: `--pytorch=autograd-nvtx` for Python commands when this nsys has the option."""
    if not is_python_command(cmd):
        return (), "not a Python command: no PyTorch host ranges requested"
    if not nsys_supports(nsys, "--pytorch"):
        return (), "this nsys has no --pytorch option: host time between CUDA calls is not recorded"
    return (NSYS_PYTORCH_HOST,), f"{NSYS_PYTORCH_HOST}: an NVTX range per autograd operator"


def workload_host_flags(nsys: str | Path, pytorch_host: bool = True) -> tuple[tuple[str, ...], str]:
    """The nsys host flags for a built-in workload (the runner is a Python program: the same
    `--pytorch=autograd-nvtx` any Python program gets, when this nsys has it) and a note."""
    if not pytorch_host:
        return (), "PyTorch host ranges not requested"
    return pytorch_host_flags(nsys, [sys.executable, "-m", "tracelab.workloads.runner"])


def workload_command(
    name: str,
    variant: str,
    backend: str,
    quick: bool,
    run_dir: str | Path,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    probe: bool = True,
    python: str | None = None,
) -> list[str]:
    """The runner command line for one variant (without the nsys prefix); a workload of several
    processes is started through torchrun, one process per GPU."""
    from .workloads import get_workload

    world = get_workload(name).world_size
    launch = (
        ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", "-m"]
        if world > 1
        else ["-m"]
    )
    cmd = [
        python or sys.executable,
        *launch,
        "tracelab.workloads.runner",
        name,
        variant,
        "--out",
        str(run_dir),
        "--backend",
        backend,
        "--seed",
        str(seed),
    ]
    if quick:
        cmd.append("--quick")
    if not probe:
        cmd.append("--no-probe")
    for key, value in (params or {}).items():
        cmd += ["--param", f"{key}={value}"]
    if backend == "nsys":
        cmd += ["--trace-file", "trace.sqlite"]
    return cmd


def build_command(
    name: str,
    variant: str,
    backend: str,
    quick: bool,
    run_dir: str | Path,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    nsys: str | Path = "nsys",
    probe: bool = True,
    nsys_extra: Sequence[str] = (),
    os_calls: bool = True,
) -> list[str]:
    """The full command that records one variant with `backend` (`nsys_extra`: more nsys flags)."""
    check_backend(backend)
    inner = workload_command(name, variant, backend, quick, run_dir, params, seed, probe)
    if backend == "nsys":
        from .workloads import get_workload

        # a variant with memory tracing (Variant.memory): CUDA memory usage events in the export
        memory = (NSYS_MEMORY,) if get_workload(name).traces_memory(variant) else ()
        return nsys_command(nsys, Path(run_dir) / "trace", inner, window=True, extra=(*nsys_extra, *memory),
                            os_calls=os_calls)
    return inner


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


def require_nsys() -> Path:
    nsys = find_nsys()
    if nsys is None:
        raise MissingDependency(
            "nsys (Nsight Systems) not found: install it, put it on PATH or set TRACELAB_NSYS, "
            "or record with --backend torch"
        )
    return nsys


def _env(run_dir: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if run_dir is not None:
        env["TRACELAB_RUN_DIR"] = str(run_dir)  # a program may leave program_meta.json there
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # NVLink multicast stays off in every recorded program and its children (shared GPUs)
    env.update(
        {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    )
    return env


def _fresh_dir(path: Path) -> Path:
    if not path.exists():
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        cand = path.with_name(f"{path.name}-{stamp}" + (f"-{i}" if i else ""))
        if not cand.exists():
            return cand
    raise BadInput("cannot find a free run directory name", path)


def _run(cmd: list[str], run_dir: Path, timeout: float | None) -> None:
    log = run_dir / "record.log"
    with open(log, "wb") as fh:
        fh.write((" ".join(cmd) + "\n").encode())
        fh.flush()
        try:
            rc = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env=_env(run_dir), timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            raise RecordError(f"{run_dir}: timed out after {timeout} s (log: {log})") from None
    if rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        last = tail[-1] if tail else "no output"
        raise RecordError(f"{run_dir}: recording failed with exit code {rc}: {last[:300]} (log: {log})")


def _finish_nsys(run_dir: Path, nsys: Path) -> None:
    """Make sure trace.sqlite exists (export the .nsys-rep when nsys did not)."""
    sqlite = run_dir / "trace.sqlite"
    rep = run_dir / "trace.nsys-rep"
    if sqlite.exists():
        return
    if not rep.exists():
        raise RecordError(f"{run_dir}: nsys wrote no trace.nsys-rep (see record.log)")
    try:
        from tracelab.io.nsys.load import export_nsys_rep

        export_nsys_rep(rep, run_dir)
    except ImportError:
        subprocess.run(
            [
                str(nsys),
                "export",
                "--type",
                "sqlite",
                "--force-overwrite",
                "true",
                "-o",
                str(sqlite),
                str(rep),
            ],
            check=True,
            capture_output=True,
        )
    if not sqlite.exists():
        raise RecordError(f"{run_dir}: exporting {rep.name} to SQLite failed")


def _export_payloads(run_dir: Path, nsys: Path) -> None:
    """Export the report again with NVTX payloads as JSON (`--include-json true`: NCCL's
    ncclCommInitRank* payloads carry each process's rank; parsers/nsys_ranks.py reads them). Kept only
    when the export succeeds; the plain export stays otherwise, and meta.json's nsys_payloads says so."""
    rep, sqlite = run_dir / "trace.nsys-rep", run_dir / "trace.sqlite"
    tmp = run_dir / "trace.payloads.sqlite"
    note = "exported with --include-json true (NCCL payloads)"
    if not rep.exists() or not nsys_supports_export(nsys, "--include-json"):
        note = "this nsys has no export --include-json: ranks from device order"
    else:
        res = subprocess.run(
            [str(nsys), "export", "--type", "sqlite", "--include-json", "true", "--force-overwrite", "true",
             "-o", str(tmp), str(rep)],
            capture_output=True,
            check=False,
        )
        if res.returncode == 0 and tmp.exists():
            tmp.replace(sqlite)
        else:
            tmp.unlink(missing_ok=True)
            note = f"export --include-json failed (exit {res.returncode}): ranks from device order"
    (run_dir / "nsys_payloads.txt").write_text(note + "\n")


def nsys_supports_export(nsys: str | Path, option: str) -> bool:
    """Whether `nsys export --help` lists `option`; False when it cannot run."""
    try:
        out = subprocess.run([str(nsys), "export", "--help"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in (out.stdout + out.stderr)


def record_workload(
    name: str,
    variant: str | None = "all",
    backend: str = "nsys",
    quick: bool = False,
    out_dir: str | Path | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    probe: bool = True,
    timeout: float | None = 900,
    pytorch_host: bool = True,
    os_calls: bool = True,
) -> list[Path]:
    """Record each selected variant in its own subprocess; returns the run directories.

    Under nsys the workload (a Python program) also gets `--pytorch=autograd-nvtx` (when `pytorch_host`
    and this nsys has the option), as `record_command` gives any Python program, so an nsys run sees the
    host side of PyTorch as a torch.profiler run does; meta.json's "nsys_host" says what was done.
    `os_calls=False` leaves OS runtime tracing out (to measure what it costs)."""
    wl = get_workload(name)
    variants = wl.resolve_variants(variant)
    check_backend(backend)
    wl.parameters(quick, params)  # validates overrides before anything runs
    nsys = require_nsys() if backend == "nsys" else None
    check_gpu()
    check_world(wl.name, wl.world_size, wl.parameters(quick, params))
    if out_dir is None:
        from .settings import runs_dir

        out_dir = runs_dir()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    host_flags, host_note = workload_host_flags(nsys, pytorch_host) if nsys is not None else ((), "")
    runs = []
    for v in variants:
        suffix = "".join(f"-{_safe(str(k))}={_safe(str(val))}" for k, val in sorted((params or {}).items()))
        run_dir = _fresh_dir(out / f"{name}-{v}-{backend}{suffix}")
        run_dir.mkdir(parents=True)
        cmd = build_command(
            name, v, backend, quick, run_dir, params, seed, nsys or "nsys", probe, host_flags, os_calls
        )
        _run(cmd, run_dir, timeout)
        if backend == "nsys":
            _finish_nsys(run_dir, nsys)
            _note_nsys_host(run_dir, host_flags, host_note, os_calls)
        runs.append(run_dir)
    return runs


def _note_nsys_host(run_dir: Path, flags: Sequence[str], note: str, os_calls: bool) -> None:
    """Record in meta.json which host-side data nsys was asked for (PyTorch ranges, OS calls)."""
    meta_path = run_dir / "meta.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    except ValueError:
        return
    if isinstance(meta, dict):
        meta["nsys_host"] = {"flags": list(flags), "note": note, "os_calls": os_calls}
        meta_path.write_text(json.dumps(meta, indent=1, default=str))


def record_command(
    cmd: Sequence[str],
    backend: str = "nsys",
    out_dir: str | Path | None = None,
    timeout: float | None = None,
    *,
    pytorch_host: bool = True,
    os_calls: bool = True,
    nsys_extra: Sequence[str] = (),
) -> Path:
    """Profile any program: nsys wraps any command; torch.profiler wraps a Python script
    (`python script.py ...` or `script.py ...`). Returns the run directory.

    Under nsys a Python command also gets `--pytorch=autograd-nvtx` (when `pytorch_host` and this
    nsys has the option): meta.json's "nsys_host" says what was done. A program may leave
    program_meta.json in $TRACELAB_RUN_DIR; it is copied into meta.json under "program"."""
    check_backend(backend)
    cmd = list(cmd)
    if not cmd:
        raise BadInput("record needs a command after --")
    if out_dir is None:
        from .settings import runs_dir

        out_dir = runs_dir()
    base = Path(cmd[0]).name if not cmd[0].endswith(".py") else Path(cmd[0]).stem
    if backend == "nsys":
        nsys = require_nsys()
        run_dir = _fresh_dir(Path(out_dir) / f"cmd-{_safe(base)}-nsys")
        run_dir.mkdir(parents=True)
        if pytorch_host:
            host_flags, host_note = pytorch_host_flags(nsys, cmd)
        else:
            host_flags, host_note = (), "PyTorch host ranges not requested"
        _run(
            nsys_command(nsys, run_dir / "trace", cmd, extra=(*host_flags, *nsys_extra), os_calls=os_calls),
            run_dir,
            timeout,
        )
        _finish_nsys(run_dir, nsys)
        if torchrun_split(cmd) is not None:  # several processes: NCCL's payloads name each one's rank
            _export_payloads(run_dir, nsys)
        trace = "trace.sqlite"
    else:
        launch = torchrun_split(cmd)
        script = launch.program if launch is not None else _python_script(cmd)
        check_gpu()
        run_dir = _fresh_dir(Path(out_dir) / f"cmd-{_safe(Path(script[0]).stem)}-torch")
        run_dir.mkdir(parents=True)
        if launch is not None:  # one profiler per rank, each rank's trace in run_dir/ranks
            _run(launch.wrapped(run_dir), run_dir, timeout)
        else:
            _run(
                [sys.executable, "-m", "tracelab.workloads.torchwrap", "--out", str(run_dir), "--", *script],
                run_dir,
                timeout,
            )
        trace = "ranks" if (run_dir / "ranks").is_dir() else "trace.json.gz"
    meta_path = run_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    extra = run_dir / "program_meta.json"
    if extra.exists():
        try:
            program = json.loads(extra.read_text())
        except ValueError:
            program = None
        if isinstance(program, dict):
            meta.update({k: v for k, v in program.items() if k in ("partitions", "pdl_kernels")})
            meta["program"] = program
    if backend == "nsys":
        meta["nsys_host"] = {"flags": list(host_flags), "note": host_note, "os_calls": os_calls}
    meta.update(
        {
            "tracelab_run": 1,
            "workload": "",
            "variant": "",
            "backend": backend,
            "command": cmd,
            "trace_file": trace,
        }
    )
    if not meta.get("gpu"):
        meta["gpu"] = _gpu_from_smi()
    meta_path.write_text(json.dumps(meta, indent=1, default=str))
    return run_dir


def _gpu_from_smi() -> dict[str, Any]:
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


# torchrun's options that take no value (torch/distributed/run.py); every other option takes one
TORCHRUN_FLAGS = frozenset(
    {
        "--standalone",
        "--module",
        "-m",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
        "--use-env",
        "--use_env",
    }
)
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class TorchrunLaunch:
    """A torchrun command line taken apart: the launcher (`torchrun` or `python -m
    torch.distributed.run`), its options, and the program each rank runs (a script, or a module
    when `module`)."""

    launcher: tuple[str, ...]
    options: tuple[str, ...]
    module: bool
    program: tuple[str, ...]

    def wrapped(self, run_dir: Path) -> list[str]:
        """The same launch with tracelab's torch.profiler wrapper between torchrun and the program:
        every rank writes its own trace into run_dir/ranks."""
        wrapper = ["-m", "tracelab.workloads.torchwrap", "--out", str(run_dir)]
        return [
            *self.launcher,
            *self.options,
            *wrapper,
            *(["--module"] if self.module else []),
            "--",
            *self.program,
        ]


def torchrun_split(cmd: Sequence[str]) -> TorchrunLaunch | None:
    """`torchrun [opts] prog [args]` or `python -m torch.distributed.run|launch [opts] prog [args]`
    taken apart (None for any other command). BadInput for `--no-python` (not a Python program) or a
    launch without a program."""
    cmd = list(cmd)
    if not cmd:
        return None
    if Path(cmd[0]).name == "torchrun":
        rest = cmd[1:]
    elif Path(cmd[0]).name.startswith("python") and len(cmd) > 2 and cmd[1] == "-m" and cmd[2] in TORCHRUN_MODULES:
        rest = cmd[3:]
    else:
        return None
    launcher = (sys.executable, "-m", "torch.distributed.run")
    options: list[str] = []
    module = False
    i = 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "--":
        opt = rest[i]
        if opt in ("--no-python", "--no_python"):
            raise BadInput("--backend torch profiles Python programs; torchrun --no-python runs something else")
        if opt in ("-m", "--module"):
            module = True
        elif opt in TORCHRUN_FLAGS or "=" in opt:
            options.append(opt)
        else:
            options += rest[i : i + 2]
            i += 1
        i += 1
    if i < len(rest) and rest[i] == "--":
        i += 1
    program = tuple(rest[i:])
    if not program:
        raise BadInput("the torchrun command names no program to run")
    return TorchrunLaunch(launcher, tuple(options), module, program)


def _python_script(cmd: list[str]) -> list[str]:
    """`[script.py, args...]` from a python command line (BadInput for anything else)."""
    if Path(cmd[0]).name.startswith("python") and len(cmd) > 1 and cmd[1] != "-c":
        if cmd[1] == "-m":
            raise BadInput(
                "--backend torch profiles a Python script (python script.py ...) or a torchrun launch; "
                "use nsys for -m"
            )
        return cmd[1:]
    if cmd[0].endswith(".py"):
        return cmd
    raise BadInput(f"--backend torch can only profile a Python script, not {cmd[0]!r}; use --backend nsys")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "cmd"


def main(argv: list[str] | None = None) -> int:
    """`python -m tracelab.record WORKLOAD [--variant V|all] [--backend nsys|torch|both] [--quick]
    [--out DIR]` (the device-side entry point; `tracelab record` is the user-facing one)."""
    import argparse

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
