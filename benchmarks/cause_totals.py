"""Gap-cause totals (count and ns per cause, from `tracelab analyze --json`) over the bundled demo runs and
the corpus traces, for one checkout of tracelab; and the difference between two such files.

    python benchmarks/cause_totals.py collect --tree /tmp/base --out /tmp/before.json
    python benchmarks/cause_totals.py collect --tree . --out /tmp/after.json
    python benchmarks/cause_totals.py diff /tmp/before.json /tmp/after.json

`collect` runs the command line of the checkout at --tree (PYTHONPATH=tree) once per trace, so each side
is exactly what a user of that commit reads. Corpus traces come from $TRACELAB_CORPUS (default
/work/shared/corpus); traces that analyze refuses are recorded with their exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".json", ".json.gz", ".sqlite")


def _demo_dirs(cache: Path) -> dict[str, Path]:
    out = {}
    for a in sorted((ROOT / "tracelab" / "demo_runs").glob("*.tar.xz")):
        name = a.name[: -len(".tar.xz")]
        d = cache / name
        if not d.exists():
            d.mkdir(parents=True)
            with tarfile.open(a) as t:
                t.extractall(d, filter="data")
        subs = [p for p in d.iterdir() if p.is_dir()]
        out[f"demo/{name}"] = subs[0] if len(subs) == 1 else d
    return out


def _corpus(root: Path) -> dict[str, Path]:
    if not root.is_dir():
        return {}
    return {f"corpus/{p.relative_to(root)}": p for p in sorted(root.rglob("*"))
            if p.is_file() and p.name.endswith(SUFFIXES)}


def _totals(tree: Path, path: Path, db: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), TRACELAB_DB=str(db))
    r = subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(path), "--json"], env=env, check=False,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return {"rc": r.returncode, "error": (r.stderr.strip().splitlines() or [""])[-1][:200]}
    doc = json.loads(r.stdout)
    causes: dict[str, list[int]] = {}
    for g in doc.get("gaps", []):
        c = causes.setdefault(g["cause"], [0, 0])
        c[0] += 1
        c[1] += int(g["duration_ns"])
    rules = {f["rule"]: f.get("wasted_ns", 0) for f in doc.get("findings", [])}
    return {"rc": 0, "causes": causes, "rules": rules}


def collect(tree: Path, out: Path, cache: Path, corpus: Path, only: str | None) -> None:
    traces = {**_demo_dirs(cache), **_corpus(corpus)}
    done = json.loads(out.read_text()) if out.exists() else {}
    for name, path in traces.items():
        if name in done or (only and only not in name):
            continue
        done[name] = _totals(tree, path, out.with_suffix(".db"))
        out.write_text(json.dumps(done, indent=1, sort_keys=True))
        print(name, done[name].get("causes", done[name].get("error")), flush=True)


def diff(before: Path, after: Path, min_ns: int) -> None:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name, {}), b.get(name, {})
        cx, cy = x.get("causes", {}), y.get("causes", {})
        changed = {c: (cx.get(c, [0, 0]), cy.get(c, [0, 0])) for c in sorted(set(cx) | set(cy))
                   if cx.get(c, [0, 0]) != cy.get(c, [0, 0]) and abs(cx.get(c, [0, 0])[1] - cy.get(c, [0, 0])[1]) >= min_ns}
        rules = {r for r in set(x.get("rules", {})) ^ set(y.get("rules", {}))}
        if changed or rules or x.get("rc") != y.get("rc"):
            print(name)
            for c, (p, q) in changed.items():
                print(f"    {c:16s} {p[0]:6d} gaps {p[1] / 1e6:10.3f} ms  ->  {q[0]:6d} gaps {q[1] / 1e6:10.3f} ms")
            if rules:
                print(f"    findings only in {'after' if set(y.get('rules', {})) - set(x.get('rules', {})) else 'before'}: "
                      f"{sorted(rules)}")
            if x.get("rc") != y.get("rc"):
                print(f"    exit status {x.get('rc')} -> {y.get('rc')}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--tree", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--cache", type=Path, default=Path("/tmp/cause_totals_demo"))
    c.add_argument("--corpus", type=Path, default=Path(os.environ.get("TRACELAB_CORPUS", "/work/shared/corpus")))
    c.add_argument("--only", help="only traces whose name contains this")
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    d.add_argument("--min-ns", type=int, default=0)
    args = p.parse_args()
    if args.cmd == "collect":
        collect(args.tree.resolve(), args.out, args.cache, args.corpus, args.only)
    else:
        diff(args.before, args.after, args.min_ns)


if __name__ == "__main__":
    main()
