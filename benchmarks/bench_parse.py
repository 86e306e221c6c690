"""Whole-process `tracelab analyze --json TRACE > /dev/null`, side by side with another tracelab version
(default: the `main` branch) and Holistic Trace Analysis (HTA) 0.6.1, on the same Kineto files.

Every run is a child process of this one, measured from outside (wall clock; user + sys CPU seconds and
peak RSS from wait4), so imports and start-up count and each peak RSS is its own. Both tracelab trees are
byte-compiled first, as an installed package is. Per repeat the order
alternates (this checkout, baseline, HTA, then the reverse), and the best wall time of each is kept.

    python benchmarks/bench_parse.py ../shared/corpus/hta/df_index_resolver__df_index_resolver.json.gz \\
        /work/team/big/x16.json --hta-python /work/team/hta-venv/bin/python --repeat 3

- tracelab: `python -m tracelab analyze --json TRACE` (the `tracelab` command's path) with PYTHONPATH set
  to this checkout, or to `git archive BASELINE` unpacked in a temporary directory (`--baseline main`;
  `--baseline ''` leaves it out).
- start-up: wall seconds from the interpreter's start (`python -c pass`, best of 5) plus the imports until the
  parser is first called (a probe wraps `tracelab.io.kineto.load.load_kineto`; best of 7), on the
  smallest trace; also the process's CPU seconds by then (steadier on a loaded machine).
- HTA (PyPI `traceinsight` 0.6.1, in its own venv: `python -m venv V && V/bin/pip install
  traceinsight==0.6.1`): TraceAnalysis (parse) + temporal breakdown + idle time breakdown +
  communication/computation overlap, as a whole process. Skipped for traces over `--hta-max-mb` of JSON
  (HTA 0.6.1 runs out of memory on the ×64 trace).

Prints one line per tool and trace (wall, CPU, MB/s, events/s, peak RSS), the ratios, and the load
average before and after each trace.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAUNCH = ["-m", "tracelab"]  # what the `tracelab` command runs (each tree's own __main__), in a neutral cwd
PROBE = r"""
import sys, time
t0 = time.perf_counter()
try:
    import tracelab.io.kineto.load as _k
except ImportError:  # a baseline from before issue 26's layout
    import tracelab.io.kineto.load as _k
_orig = _k.load_kineto
def _probe(*a, **kw):
    sys.stderr.write(f"@@startup {time.perf_counter() - t0:.6f} {time.process_time():.6f}\n")
    sys.stderr.flush()
    return _orig(*a, **kw)
_k.load_kineto = _probe
sys.argv[0] = 'tracelab'
import tracelab.cli as _cli
getattr(_cli, "entry", _cli.main)()
"""

HTA_WORKER = r"""
import os, sys, tempfile, logging, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp(prefix="hta-bench-")
src = sys.argv[1]
os.symlink(os.path.abspath(src), os.path.join(d, os.path.basename(src)))
a = TraceAnalysis(trace_dir=d)
ranks = sorted(a.t.traces.keys())
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(ranks=ranks, visualize=False)
a.get_comm_comp_overlap(visualize=False)
"""


@dataclass
class Run:
    wall: float
    cpu: float
    user: float
    sys: float
    rss: int  # bytes
    stderr: str


def measure(cmd: list[str], env: dict[str, str], timeout: float) -> Run:
    """One child process, stdout to /dev/null; wall clock and its own rusage (wait4). It runs in an empty
    directory: `python -c` puts the working directory first on sys.path, which must not shadow the
    tracelab that PYTHONPATH names."""
    with open(os.devnull, "wb") as devnull, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as cwd:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=devnull, stderr=err, env=env, cwd=cwd)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise RuntimeError(f"timed out after {timeout:.0f} s: {' '.join(cmd[:2])}")
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if proc.returncode != 0:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {tail}")
    return Run(wall, ru.ru_utime + ru.ru_stime, ru.ru_utime, ru.ru_stime, ru.ru_maxrss * 1024, text)


def uncompressed_size(path: Path) -> int:
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    size = 0
    with gzip.open(path, "rb") as g:
        while block := g.read(1 << 24):
            size += len(block)
    return size


def count_events(path: Path) -> int:
    """Elements of traceEvents, counted with tracelab's own parser stats (this checkout)."""
    sys.path.insert(0, str(ROOT))
    from tracelab.io.detect import load_trace

    return int(load_trace(path).meta.stats.get("trace_events", 0))


def unpack(ref: str, into: Path) -> Path:
    """`git archive REF` of this repository, unpacked into `into`; returns the directory."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")
    if (into / "setup.py").is_file():  # the optional C scanner, as this checkout's editable install has it
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=into, capture_output=True,
                       check=False)
    return into


def compile_bytecode(python: str, tree: Path) -> None:
    """Byte-compile a checkout's tracelab as `pip install` does for an installed package (HTA's venv
    has its .pyc files): with PYTHONDONTWRITEBYTECODE set, or an unwritable tree, every run would
    otherwise compile tracelab from source (~0.1 s of CPU per process)."""
    subprocess.run([python, "-m", "compileall", "-q", str(tree / "tracelab")], capture_output=True, check=False)
    print(f"byte-compiled {tree / 'tracelab'}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def interpreter_start(python: str) -> float:
    return min(measure([python, "-c", "pass"], dict(os.environ), 30).wall for _ in range(5))


def fmt(label: str, r: Run, mb: float, events: int) -> str:
    return (
        f"  {label:26s} wall {r.wall:7.2f} s  cpu {r.cpu:7.2f} s (user {r.user:6.2f} sys {r.sys:5.2f})"
        f"  {mb / r.wall:7.1f} MB/s  {events / r.wall / 1e6:6.3f} M ev/s  peak RSS {r.rss / 2**30:5.2f} GiB"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tracelab analyze --json vs a baseline version vs HTA (whole processes)")
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", ""), help="python of a venv with traceinsight")
    ap.add_argument("--baseline", default="main", help="git ref of the tracelab to compare with ('' = none)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool; the best wall time is kept")
    ap.add_argument("--hta-max-mb", type=float, default=1000.0, help="skip HTA above this many MB of JSON")
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args(argv)

    py = sys.executable
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; load average {load_average()}")
    compile_bytecode(py, ROOT)
    with tempfile.TemporaryDirectory(prefix="tracelab-baseline-") as tmp:
        variants: list[tuple[str, list[str], dict[str, str]]] = []
        env_here = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
        variants.append(("tracelab (this checkout)", [py, *LAUNCH], env_here))
        if args.baseline:
            base = unpack(args.baseline, Path(tmp))
            compile_bytecode(py, base)
            env_base = dict(env_here, PYTHONPATH=str(base))
            variants.append((f"tracelab ({args.baseline})", [py, *LAUNCH], env_base))

        # start-up: interpreter + imports until the parser is called, on the smallest trace
        smallest = min(args.traces, key=lambda p: p.stat().st_size).resolve()
        t_py = interpreter_start(py)
        print(f"start-up (interpreter {t_py:.3f} s + imports until the parse begins; {smallest.name}):")
        for label, _cmd, env in [v for v in variants if "decode procs" not in v[0]]:
            where = measure([py, "-c", "import tracelab, sys; sys.stderr.write(tracelab.__file__)"], env, 60)
            assert where.stderr.startswith(env["PYTHONPATH"]), (label, where.stderr)  # the version we mean
            probes, cpus = [], []
            for _ in range(max(7, args.repeat)):
                r = measure([py, "-c", PROBE, "analyze", "--json", str(smallest)], env, args.timeout)
                line = [x for x in r.stderr.splitlines() if x.startswith("@@startup ")][-1].split()
                probes.append(float(line[1]))
                cpus.append(float(line[2]))
            print(f"  {label:26s} {t_py + min(probes):.3f} s wall ({min(cpus):.3f} s CPU of the process by then)")

        for trace in args.traces:
            trace = trace.resolve()
            mb = uncompressed_size(trace) / 1e6
            events = count_events(trace)
            print(f"\n{trace.name}: {trace.stat().st_size / 1e6:.1f} MB on disk, {mb:.1f} MB JSON, {events:,} events;"
                  f" load average {load_average()}")
            tools = [(label, [*cmd, "analyze", "--json", str(trace)], env) for label, cmd, env in variants]
            if args.hta_python and mb <= args.hta_max_mb:
                tools.append(("HTA 0.6.1", [args.hta_python, "-c", HTA_WORKER, str(trace)], dict(os.environ)))
            elif args.hta_python:
                print(f"  HTA skipped (over --hta-max-mb {args.hta_max_mb:.0f} MB)")
            best: dict[str, Run] = {}
            for i in range(args.repeat):
                for label, cmd, env in tools if i % 2 == 0 else tools[::-1]:
                    r = measure(cmd, env, args.timeout)
                    if label not in best or r.wall < best[label].wall:
                        best[label] = r
            for label, _cmd, _env in tools:
                print(fmt(label, best[label], mb, events))
            ours = best[tools[0][0]]
            for label, r in best.items():
                if label != tools[0][0]:
                    print(f"  vs {label:23s} {r.wall / ours.wall:5.2f}x wall, {r.cpu / ours.cpu:5.2f}x cpu,"
                          f" peak RSS ratio (this / it) {ours.rss / r.rss:4.2f}")
            print(f"  load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
