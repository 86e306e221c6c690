"""Pack recorded run directories as demo runs: tracelab/demo_runs/<run dir name>.tar.xz.

    python tests/data/bundle_runs.py RUNS_DIR NAME [NAME ...] [--drop-probes]

Each archive holds one run directory with meta.json and the trace (record.log and .nsys-rep left
out). `--drop-probes` leaves sm_probe.npz out too (and the `probe` entry of meta.json, noting why):
the priorities runs' 135k probe rows would be 0.7 MB each, and nothing about that workload needs
measured SM lanes.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

DEST = Path(__file__).resolve().parents[2] / "tracelab" / "demo_runs"


def bundle(run: Path, drop_probes: bool) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / run.name
        d.mkdir()
        meta = json.loads((run / "meta.json").read_text())
        for f in run.iterdir():
            if f.name in ("record.log", "meta.json") or f.suffix == ".nsys-rep":
                continue
            if drop_probes and f.name == "sm_probe.npz":
                continue
            if f.is_dir():  # a multi-rank torch run: ranks/rank<R>.json.gz
                shutil.copytree(f, d / f.name)
            else:
                shutil.copy2(f, d / f.name)
        if drop_probes and meta.pop("probe", None) is not None:
            meta["bundle_note"] = "sm_probe.npz left out of the demo bundle to keep it small"
        (d / "meta.json").write_text(json.dumps(meta, indent=1))
        out = DEST / f"{run.name}.tar.xz"
        with tarfile.open(out, "w:xz") as tar:
            for f in sorted([d, *d.rglob("*")]):
                info = tar.gettarinfo(str(f), arcname=str(f.relative_to(tmp)))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 1795305600  # 2026-11-22 (fixed: reproducible archives)
                if f.is_file():
                    with open(f, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
    return out


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    drop = "--drop-probes" in sys.argv
    root = Path(args[0])
    for name in args[1:]:
        p = bundle(root / name, drop)
        print(p.name, p.stat().st_size)
