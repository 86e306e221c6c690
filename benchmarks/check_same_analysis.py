"""Do two checkouts give the same `tracelab analyze` output? Runs the real CLI of both on many inputs and
diffs the documents (a speed-up of the analyses must not change one number or word of them).

    python benchmarks/check_same_analysis.py --baseline DIR [--big] [--jobs 2] [--only SUBSTR]

DIR is another checkout, e.g. `git archive main | tar -x -C DIR`. Inputs: every bundled demo run
(tracelab/demo.py; unpacked into .scratch/check/demo/: `--only /check/demo/`), the recorded fixtures of
tests/data (the .sqlite.xz ones unpacked into run directories; tests/data/multigpu's run directories too:
`--only multigpu`), every Kineto / nsys trace of ../shared/corpus and its 8-rank DLRM set as one run; with
`--big` also the 1M-kernel nsys export of `make_big_nsys.py` and a 64-rank copy of the DLRM set. Each
input is analysed with `analyze --json`, and the small ones also with `--steps 1:`, with
`--gap-threshold-us 0 --exclude-orphans` and as text (`analyze --top 50`). Both sides run in child
processes with their own code first on sys.path, the same interpreter and a throw-away store. The
document holds no timings, so the comparison is of the whole output (stdout, exit status, stderr).
Prints one line per difference and a summary; exit 1 when anything differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CORPUS = ROOT.parent / "shared" / "corpus"
SCRATCH = ROOT / ".scratch" / "check"
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
SMALL = 20 << 20  # inputs under this size also get the option variants


def _run_dirs_from_fixtures(out: Path) -> list[Path]:
    """tests/data fixtures as inputs; the xz-compressed nsys exports unpacked into run directories."""
    inputs = [DATA / d for d in ("host_blocked_torch", "torch_mixed_small", "train_plain_torch", "ddp")]
    for stem in ("host_blocked_nsys", "nsys_mixed_small", "train_plain_nsys"):
        d = out / stem
        if not (d / "trace.sqlite").is_file():
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(DATA / f"{stem}.meta.json", d / "meta.json")
            with lzma.open(DATA / f"{stem}.sqlite.xz") as src, open(d / "trace.sqlite.part", "wb") as dst:
                shutil.copyfileobj(src, dst)
            (d / "trace.sqlite.part").rename(d / "trace.sqlite")
        inputs.append(d)
    gloo = out / "comm_overlap_gloo"
    if not gloo.is_dir():
        tmp = Path(tempfile.mkdtemp(dir=out))
        with tarfile.open(DATA / "comm_overlap_gloo_h100.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(gloo)
    inputs += sorted(p for p in gloo.iterdir() if p.is_dir())
    return inputs + _multigpu_run_dirs(out / "multigpu")


def _multigpu_run_dirs(out: Path) -> list[Path]:
    """The run directories of tests/data/multigpu (issue 24's multi-GPU and loop recordings), their
    `trace.sqlite.xz` unpacked (the record logs left out, as tests/multigpu_util.run_dir does)."""
    runs = []
    out.mkdir(parents=True, exist_ok=True)
    for src in sorted(p for p in (DATA / "multigpu").iterdir() if p.is_dir()):
        d = out / src.name
        if not d.is_dir():
            tmp = Path(tempfile.mkdtemp(dir=out))
            shutil.copytree(src, tmp / src.name, ignore=shutil.ignore_patterns("*.xz", "record.log"))
            if (src / "trace.sqlite.xz").exists():
                with lzma.open(src / "trace.sqlite.xz") as a, open(tmp / src.name / "trace.sqlite", "wb") as b:
                    shutil.copyfileobj(a, b)
            (tmp / src.name).rename(d)
            tmp.rmdir()
        runs.append(d)
    return runs


def _rank_copy(src: Path, n: int, out: Path) -> Path:
    d = out / f"dlrm_{n}ranks"
    if not d.is_dir():
        tmp = Path(tempfile.mkdtemp(dir=out))
        files = sorted(src.glob("*.json"))
        for i in range(n):
            shutil.copyfile(files[i % len(files)], tmp / f"worker{i}.json")
        tmp.rename(d)
    return d


def collect(big: bool) -> list[tuple[Path, bool]]:
    """(input, small) pairs."""
    sys.path.insert(0, str(ROOT))
    from tracelab.demo import demo_run_paths

    SCRATCH.mkdir(parents=True, exist_ok=True)
    inputs = list(demo_run_paths(SCRATCH / "demo"))
    inputs += _run_dirs_from_fixtures(SCRATCH / "fixtures")
    if CORPUS.is_dir():
        inputs += sorted(
            p for p in CORPUS.rglob("*")
            if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and "dlrm_kineto_8rank" not in p.parts
        )
        inputs.append(CORPUS / "param" / "dlrm_kineto_8rank")
    if big:
        nsys = ROOT / ".scratch" / "B" / "big_nsys.sqlite"
        if not nsys.is_file():
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_big_nsys.py")], check=True)
        inputs.append(nsys)
        inputs.append(_rank_copy(CORPUS / "param" / "dlrm_kineto_8rank", 64, SCRATCH))
    return [(p, _size(p) < SMALL and not (big and p in inputs[-2:])) for p in inputs]


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


VARIANTS = {
    "json": ["--json"],
    "json-steps1": ["--json", "--steps", "1:"],
    "json-all-idle": ["--json", "--gap-threshold-us", "0", "--exclude-orphans"],
    "text": ["--top", "50"],
}


def run_one(side: Path, path: Path, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRACELAB_DB")}
        env.update(PYTHONPATH=str(side), TRACELAB_DB=str(Path(tmp) / "t.db"), COLUMNS="100", NO_COLOR="1")
        proc = subprocess.run(
            [sys.executable, "-m", "tracelab", "analyze", str(path), *args],
            capture_output=True, env=env, check=False, timeout=1800, cwd=tmp,
        )
    return {"rc": proc.returncode, "stdout": proc.stdout.decode("utf-8", "replace"),
            "stderr": proc.stderr.decode("utf-8", "replace").replace(str(side), "<ROOT>")}


def _first_difference(a: object, b: object, where: str = "") -> str:
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}.{k}: only on one side"
            d = _first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return ""
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return ""
    return "" if a == b else f"{where}: {a!r:.120} vs {b!r:.120}"


def compare(a: dict, b: dict) -> str:
    if a["rc"] != b["rc"]:
        return f"exit {a['rc']} vs {b['rc']}: {a['stderr'][-300:]!r} / {b['stderr'][-300:]!r}"
    if a["stdout"] != b["stdout"]:
        try:
            return _first_difference(json.loads(a["stdout"]), json.loads(b["stdout"])) or "same JSON, other bytes"
        except ValueError:
            la, lb = a["stdout"].splitlines(), b["stdout"].splitlines()
            for i, (x, y) in enumerate(zip(la, lb)):
                if x != y:
                    return f"text line {i + 1}: {x!r:.120} vs {y!r:.120}"
            return f"text: {len(la)} vs {len(lb)} lines"
    if a["rc"] and a["stderr"] != b["stderr"]:
        return f"stderr {a['stderr'][-200:]!r} vs {b['stderr'][-200:]!r}"
    return ""


def cached(side: Path, label: str, path: Path, variant: str) -> dict:
    """Results of a baseline are kept in .scratch/check (keyed by its code's hash) for the next run."""
    code = hashlib.sha256()
    for f in sorted((side / "tracelab").rglob("*.py")):
        code.update(f.read_bytes())
    key = hashlib.sha256(f"{code.hexdigest()}|{path}|{variant}".encode()).hexdigest()[:24]
    f = SCRATCH / "cache" / label / f"{key}.json"
    if f.is_file():
        out = json.loads(f.read_text())
        if out["rc"] >= 0:  # not killed by a signal
            return out
    out = run_one(side, path, VARIANTS[variant])
    if out["rc"] >= 0:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(out))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (e.g. main)")
    ap.add_argument("--big", action="store_true", help="also the 1M-kernel nsys export and 64 DLRM ranks")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="inputs whose path contains this")
    ap.add_argument("--mine", type=Path, default=ROOT, help="the checkout to check (default: this one)")
    ap.add_argument("--baseline-only", action="store_true", help="only run (and cache) the baseline's outputs")
    args = ap.parse_args(argv)
    inputs = collect(args.big)
    if args.only:
        inputs = [(p, s) for p, s in inputs if args.only in str(p)]
    tasks = [(p, v) for p, small in inputs for v in (VARIANTS if small else ["json"])]

    def check(task: tuple[Path, str]) -> tuple[Path, str, str, int]:
        p, v = task
        base = cached(args.baseline.resolve(), "baseline", p, v)
        if args.baseline_only:
            return p, v, "", base["rc"]
        mine = run_one(args.mine.resolve(), p, VARIANTS[v])
        return p, v, compare(base, mine), base["rc"]

    differ = failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for p, v, diff, rc in pool.map(check, tasks):
            if rc:
                failed += 1
            if diff:
                differ += 1
                print(f"DIFFERS {p} [{v}]: {diff}", flush=True)
    print(
        f"{len(inputs)} inputs, {len(tasks)} outputs compared: {len(tasks) - differ} identical, {differ} differ "
        f"({failed} outputs are a refusal, exit != 0, on both sides alike unless listed)"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
