"""The bundled example runs: every workload variant recorded on a real GPU (NVIDIA H200) under
nsys and torch.profiler, shipped compressed in `tracelab/demo_runs/*.tar.xz` (one run directory
each: meta.json, trace.sqlite or trace.json.gz, sm_probe.npz).

`demo_run_paths()` unpacks them once into a cache directory (never touching the package files)
and returns the run directories, which `tracelab.io.load_trace` / `load_run_dir` read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from .errors import BadInput

DEMO_DIR = Path(__file__).resolve().parent / "demo_runs"


def demo_archives() -> list[Path]:
    return sorted(DEMO_DIR.glob("*.tar.xz"))


def demo_cache_dir() -> Path:
    env = os.environ.get("TRACELAB_DEMO_CACHE")
    if env:
        return Path(env)
    from .settings import data_dir

    return data_dir() / "demo_runs"


def _unpack(archive: Path, cache: Path) -> Path:
    name = archive.name[: -len(".tar.xz")]
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    target = cache / f"{name}-{digest}"
    if (target / "meta.json").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache))
    try:
        with tarfile.open(archive, "r:xz") as tar:
            members = tar.getmembers()
            for m in members:  # our own archives, still: no links, no absolute or parent paths
                if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in Path(m.name).parts:
                    raise BadInput(f"unexpected member {m.name!r}", archive)
            try:
                tar.extractall(tmp, members=members, filter="data")
            except TypeError:  # Python without extraction filters (checked above instead)
                tar.extractall(tmp, members=members)
        inner = [p for p in tmp.iterdir() if p.is_dir()]
        if len(inner) != 1 or not (inner[0] / "meta.json").is_file():
            raise BadInput("demo archive must hold one run directory with meta.json", archive)
        try:
            inner[0].rename(target)
        except OSError:  # another process unpacked it first
            if not (target / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def demo_run_paths(cache: str | Path | None = None) -> list[Path]:
    """Run directories of every bundled demo run (unpacked into `cache` on first use)."""
    root = Path(cache) if cache is not None else demo_cache_dir()
    return [_unpack(a, root) for a in demo_archives()]


def demo_run(name: str, cache: str | Path | None = None) -> Path:
    """One demo run by name, e.g. 'pdl-pdl-nsys' (BadInput listing the names otherwise)."""
    archives = {a.name[: -len(".tar.xz")]: a for a in demo_archives()}
    if name not in archives:
        raise BadInput(f"no demo run {name!r} (have: {', '.join(sorted(archives))})")
    return _unpack(archives[name], Path(cache) if cache is not None else demo_cache_dir())
