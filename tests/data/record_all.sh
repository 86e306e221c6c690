#!/usr/bin/env bash
# Records every workload variant under both backends plus the fixtures, on the GPU machine.
# Usage (from the repo root): tests/data/record_all.sh OUTDIR [WORKLOAD...]
# Needs: python3 with torch+triton+cuda.bindings, nsys (NSYS or PATH), .nsys-libs when the
# nsys importer lacks libdw (see tests/data/README.md).
set -u
out=${1:?outdir}; shift
workloads=${*:-overlap sync_pitfalls pdl graphs green_contexts}
mkdir -p "$out/runs" "$out/fixtures" "$out/logs"
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/tl_ext}
for b in ${BACKENDS:-torch nsys}; do
  for w in $workloads; do
    s=$(date +%s)
    python3 -m tracelab.record "$w" --variant all --backend $b --quick --out "$out/runs" \
      > "$out/logs/$w-$b.log" 2>&1
    echo "$w $b rc=$? $(( $(date +%s) - s ))s"
  done
done
