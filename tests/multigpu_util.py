"""The multi-GPU and loop fixtures of tests/data/multigpu (recorded on 4 H200s, tests/data/README.md):
run directories whose nsys export is stored xz-compressed (`trace.sqlite.xz`); `run_dir` unpacks one
into a temporary directory, ready for `tracelab analyze`."""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

MULTI = Path(__file__).parent / "data" / "multigpu"


def run_dir(name: str, tmp: Path) -> Path:
    """A copy of tests/data/multigpu/NAME under tmp with trace.sqlite unpacked."""
    src = MULTI / name
    dst = Path(tmp) / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.xz", "record.log"))
    packed = src / "trace.sqlite.xz"
    if packed.exists():
        (dst / "trace.sqlite").write_bytes(lzma.decompress(packed.read_bytes()))
    return dst
