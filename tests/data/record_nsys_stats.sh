#!/usr/bin/env bash
# Issue 27: nsys's own GPU time by NVTX range, the reference for tests/test_nsys_stats.py.
# `nsys stats --report nvtx_gpu_proj_sum` and `nvtx_gpu_proj_trace` (CSV) on
#   - two bundled demo runs' exports (tracelab/demo_runs/*-nsys.tar.xz: trace.sqlite, NVTX phase ranges and
#     --pytorch=autograd-nvtx ranges),
#   - tests/data/nsys_mixed_small (the .sqlite.xz export tracelab reads; the .nsys-rep beside it too),
#   - a fresh recording of a small NVTX program under this nsys (`--sample=none -t cuda,nvtx`, exported to
#     SQLite): the sync_pitfalls item_every_step loop, --quick.
# and `nsys recipe nvtx_gpu_proj_sum` on the .nsys-rep files (needs the recipe's Python packages; its failure
# is only logged).
# Run from the repo root on a machine with a GPU and nsys (torch for the recording):
#   OUT=/some/dir NSYS=/path/to/nsys LD_LIBRARY_PATH=$PWD/.nsys-libs:$LD_LIBRARY_PATH bash tests/data/record_nsys_stats.sh
# Writes $OUT/nsys_stats.tar.xz (folder nsys_stats/: <name>_nvtx_gpu_proj_{sum,trace}.csv, recorded.sqlite.xz,
# recorded.meta.json, recipe outputs) and $OUT/nsys_stats.log. Unpack it into tests/data/ (tests/data/nsys_stats/).
set -u
OUT=${OUT:?set OUT}
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
export PYTHONPATH=${PYTHONPATH:-$PWD}
W=$(mktemp -d /tmp/nsys_stats.XXXX)
D=$W/nsys_stats
mkdir -p "$D" "$OUT"
RUNS="sync_pitfalls-item_every_step-nsys graphs-eager-nsys"
pack() { tar -C "$W" -cJf "$OUT/nsys_stats.tar.xz" nsys_stats; ls -la "$OUT"; }
trap pack EXIT  # also when a timeout stops the script: what was made so far comes back
trap 'exit 143' TERM INT

stats() {  # stats INPUT NAME: both projection reports as CSV, D/NAME_<report>.csv
  echo "== nsys stats $2 ($1)"
  "$NSYS" stats --report nvtx_gpu_proj_sum,nvtx_gpu_proj_trace --format csv \
    --force-overwrite true --output "$D/$2" "$1"
  echo "rc=$?"
}

recipe() {  # recipe REP NAME: the recipe's output folder (its CSV / parquet / notebook) as D/NAME_recipe/
  echo "== nsys recipe nvtx_gpu_proj_sum $2"
  "$NSYS" recipe nvtx_gpu_proj_sum --input "$1" --output "$D/$2_recipe" --force-overwrite
  echo "rc=$?"
}

{
  date -u; "$NSYS" --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for r in $RUNS; do
    tar -xJf "tracelab/demo_runs/$r.tar.xz" -C "$W" && stats "$W/$r/trace.sqlite" "$r"
  done
  xz -dc tests/data/nsys_mixed_small.sqlite.xz > "$W/nsys_mixed_small.sqlite" && stats "$W/nsys_mixed_small.sqlite" nsys_mixed_small
  cp tests/data/nsys_mixed_small.nsys-rep "$W/mixed_rep.nsys-rep" && stats "$W/mixed_rep.nsys-rep" nsys_mixed_small_rep

  # a fresh recording under this nsys: cuda + nvtx only, no sampling, the measured window only
  R=$W/recorded; mkdir -p "$R"
  echo "== record"
  timeout 300 "$NSYS" profile --sample=none --cpuctxsw=none -t cuda,nvtx --capture-range=cudaProfilerApi \
    --capture-range-end=stop --export=sqlite --force-overwrite=true -o "$R/trace" \
    python3 -m tracelab.workloads.runner sync_pitfalls item_every_step --out "$R" --backend nsys --quick --no-probe \
    --trace-file trace.sqlite
  echo "rc=$?"
  if [ -f "$R/trace.sqlite" ]; then
    stats "$R/trace.sqlite" recorded
    xz -9 -c "$R/trace.sqlite" > "$D/recorded.sqlite.xz"
    cp "$R/meta.json" "$D/recorded.meta.json" 2>/dev/null
  fi
  # last (they may need Python packages the machine lacks, and take longest): the recipe on both reports
  recipe "$W/mixed_rep.nsys-rep" nsys_mixed_small
  [ -f "$R/trace.nsys-rep" ] && recipe "$R/trace.nsys-rep" recorded
  "$NSYS" stats --help-reports nvtx_gpu_proj_sum 2>&1 | head -60
  ls -la "$D"
} > "$OUT/nsys_stats.log" 2>&1
