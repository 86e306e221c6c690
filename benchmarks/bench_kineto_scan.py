"""The Kineto C scanner alone (tracelab/_native/_kineto_scan.c), this checkout's source vs another version's
(default: the `main` branch), on the traceEvents pieces of a real trace.

    python benchmarks/bench_kineto_scan.py ../shared/corpus/hta/df_index_resolver__df_index_resolver.json.gz \\
        [--baseline main] [--repeat 7]

Both sources are compiled here with the same command (the interpreter's CC / CFLAGS, `-shared -fPIC -O3`,
as setup.py builds the extension), loaded side by side into this process, and fed the same pieces (cut
by the parser's own streaming, `kineto_stream.EventChunks`). Per repeat the order alternates; the best
CPU time (`time.process_time`, the scan runs on this thread) of each is kept. Prints CPU seconds, MB/s,
events/s, how many pieces each declined (0 on an ordinary trace), the ratio, and the load average.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "tracelab/_native/_kineto_scan.c"


def compile_scanner(source: Path, out_dir: Path, label: str) -> ModuleType:
    out = out_dir / label / f"_kineto_scan{sysconfig.get_config_var('EXT_SUFFIX')}"
    out.parent.mkdir(parents=True)
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    cflags = (sysconfig.get_config_var("CFLAGS") or "").split()
    cmd = [*cc, *cflags, "-shared", "-fPIC", "-O3", "-I", sysconfig.get_config_var("INCLUDEPY"), str(source)]
    subprocess.run([*cmd, "-o", str(out)], check=True)
    spec = importlib.util.spec_from_file_location("_kineto_scan", out)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pieces_of(trace: Path) -> list[bytes]:
    sys.path.insert(0, str(ROOT))
    from tracelab.io.kineto.stream import EventChunks

    chunks = EventChunks(trace, lambda piece: bytes(piece))
    return list(chunks)


def scan_all(mod: ModuleType, pieces: list[bytes]) -> tuple[float, int, int]:
    t0 = time.process_time()
    events = declined = 0
    for p in pieces:
        got = mod.scan(p)
        if got is None:
            declined += 1
        else:
            events += got[0]
    return time.process_time() - t0, events, declined


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--baseline", default="main", help="git ref whose _kineto_scan.c to compare with")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    pieces = pieces_of(args.trace)
    mb = sum(map(len, pieces)) / 1e6
    print(f"{args.trace.name}: {len(pieces)} pieces, {mb:.1f} MB of traceEvents")
    with tempfile.TemporaryDirectory(prefix="bench-kineto-scan-") as tmp:
        base_src = Path(tmp) / "baseline.c"
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.baseline}:{SOURCE}"], capture_output=True, check=False)
        base_src.write_bytes(shown.stdout if shown.returncode == 0 else b"")
        variants = [("this checkout", compile_scanner(ROOT / SOURCE, Path(tmp), "here"))]
        if shown.returncode == 0:
            variants.append((args.baseline, compile_scanner(base_src, Path(tmp), "base")))
        best: dict[str, tuple[float, int, int]] = {}
        for r in range(args.repeat):
            for label, mod in variants if r % 2 == 0 else variants[::-1]:
                got = scan_all(mod, pieces)
                if label not in best or got[0] < best[label][0]:
                    best[label] = got
        for label, (cpu, events, declined) in best.items():
            print(
                f"  {label:16s} cpu {cpu:6.3f} s  {mb / cpu:7.1f} MB/s  {events / cpu / 1e6:6.2f} M ev/s  "
                f"{events:,} events, {declined} pieces declined"
            )
        if len(best) == 2:
            here, base = best["this checkout"][0], best[args.baseline][0]
            print(f"  this checkout / {args.baseline}: {here / base:.3f} x the CPU time")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process {rss:.0f} MB; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
