"""SM busy (and green-context partitions) of every bundled run, per device: the before/after table of
issue sm-s2 (torch vs nsys agreement of the estimated SM figures).

Usage: PYTHONPATH=. python benchmarks/sm_bundled_table.py [--out FILE.json] [--only SUBSTR]
Unpacks tracelab/demo_runs/*.tar.xz into a temporary folder and loads each with tracelab.api.load.
"""

from __future__ import annotations

import argparse
import json
import tarfile
import tempfile
from pathlib import Path

from tracelab import api
from tracelab.analyses.sm.lanes import sm_summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    runs = sorted(Path(__file__).resolve().parent.parent.joinpath("tracelab", "demo_runs").glob("*.tar.xz"))
    table: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tar in runs:
            name = tar.name[: -len(".tar.xz")]
            if a.only not in name:
                continue
            dest = Path(tmp) / name
            with tarfile.open(tar) as t:
                t.extractall(dest, filter="data")
            (root,) = [p for p in dest.iterdir() if p.is_dir()]
            tl = api.load(root)
            rows = []
            for d in sorted({(int(x.rank), int(x.device)) for x in tl.devices}):
                s = sm_summary(tl, *d)
                parts = " ".join(
                    f"g{p.green_context}:{p.sm_count}={100 * p.busy_fraction:.1f}" for p in s.partitions
                )
                rows.append([d[0], d[1], s.source, round(100 * s.busy_fraction, 1), parts])
                print(f"{name:48s} r{d[0]} d{d[1]} {s.source:9s} {100 * s.busy_fraction:5.1f}%  {parts}", flush=True)
            table[name] = rows
    if a.out:
        Path(a.out).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
