"""Find an `nsys` binary and export `.nsys-rep` reports to SQLite with it."""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from tracelab.errors import MissingDependency, TraceFormatError

NSYS_ENV = "TRACELAB_NSYS"
_SEARCH_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
)


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def find_nsys() -> Path | None:
    """TRACELAB_NSYS (a binary or a directory holding one), then PATH, then the standard install
    directories (newest version first)."""
    env = os.environ.get(NSYS_ENV)
    if env:
        p = Path(env).expanduser()
        for cand in (p, p / "nsys", p / "bin" / "nsys"):
            if _executable(cand):
                return cand
    found = shutil.which("nsys")
    if found:
        return Path(found)
    for pattern in _SEARCH_GLOBS:
        for cand in sorted(glob.glob(pattern), reverse=True):
            if _executable(Path(cand)):
                return Path(cand)
    return None


def export_command(nsys: str | Path, rep_path: Path, out_path: Path, overwrite: bool = True) -> list[str]:
    """The `nsys export` command line. `overwrite` only for tracelab's own private output folder:
    a command suggested to the user never overwrites a file."""
    force = ["--force-overwrite", "true"] if overwrite else []
    return [str(nsys), "export", "--type", "sqlite", *force, "--output", str(out_path), str(rep_path)]


def free_export_path(rep: Path) -> Path:
    """Where a suggested export of `rep` can go without replacing anything: X.sqlite beside it, else
    X-1.sqlite, X-2.sqlite, ..."""
    target = rep.with_suffix(".sqlite")
    n = 1
    while target.exists() or target.is_symlink():
        target = rep.with_name(f"{rep.stem}-{n}.sqlite")
        n += 1
    return target


def export_nsys_rep(rep_path: str | Path, out_dir: str | Path, timeout: float = 900.0) -> Path:
    """Export `rep_path` to `<out_dir>/<stem>.sqlite` with nsys and return that path. The report is
    only read. Raises MissingDependency (with the exact command to run elsewhere) when no nsys is
    installed, TraceFormatError when nsys cannot export the file."""
    rep = Path(rep_path)
    if not rep.is_file():
        raise TraceFormatError("no such .nsys-rep file", rep)
    out = Path(out_dir) / (rep.stem + ".sqlite")
    nsys = find_nsys()
    if nsys is None:
        target = free_export_path(rep.resolve())
        cmd = shlex.join(export_command("nsys", rep.resolve(), target, overwrite=False))
        raise MissingDependency(
            f"{rep}: reading .nsys-rep needs Nsight Systems (`nsys`), not found on PATH, in ${NSYS_ENV} or under "
            f"/opt/nvidia; run `{cmd}` where nsys is installed, then `tracelab import {shlex.quote(str(target))}`"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".partial.sqlite")
    tmp.unlink(missing_ok=True)
    try:
        proc = subprocess.run(
            export_command(nsys, rep, tmp), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        tmp.unlink(missing_ok=True)
        raise TraceFormatError(f"nsys export did not finish in {timeout:.0f} s", rep) from None
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        detail = (proc.stderr or proc.stdout or "").strip().splitlines()
        last = detail[-1] if detail else f"exit code {proc.returncode}"
        raise TraceFormatError(f"nsys export failed: {last}", rep)
    tmp.replace(out)
    return out
