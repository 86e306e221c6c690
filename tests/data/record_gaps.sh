#!/usr/bin/env bash
# Issue 10 (gap causes): one GPU-machine session, through the real CLI.
#  sync   - re-record `sync_pitfalls` (all variants, --quick) under nsys (which now adds
#           --pytorch=autograd-nvtx for workloads) and under torch.profiler;
#  ctl    - control: item_every_step and synchronize_in_loop under nsys WITHOUT the PyTorch host ranges
#           (what the old bundled runs had), same session;
#  fix    - the OS-blocking fixture (programs/host_blocked.py) under both backends;
#  ovh    - what OS-runtime tracing (osrt) costs: train_plain.py (40 steps, launch-bound) and
#           host_blocked.py, no profiler / nsys without osrt / nsys with osrt, alternating, twice;
#           the programs' own clocks.
# Run from the repo root on the GPU machine, with OUT set; wheels in ${WHL:-.whl}, nsys libs in
# ${NSYS_LIBS:-.nsys-libs}. Everything lands in $OUT (logs even on failure). STAGES selects stages.
source "$(dirname "$0")/device_env.sh"
export TRACELAB_DB=/tmp/tl_gaps.db
W=/tmp/gaps; rm -rf $W; mkdir -p $W/logs $W/runs $W/ctl $W/fix $W/ovh
deadline=$(( $(date +%s) + ${BUDGET_S:-540} ))
left() { echo $(( deadline - $(date +%s) )); }
pack() {
  (cd $W && tar --exclude='*.nsys-rep' -cJf $OUT/gaps_runs.tar.xz runs ctl fix ovh logs 2>/dev/null)
  cp $W/logs/*.txt $OUT/ 2>/dev/null; ls -la $OUT
}
trap pack EXIT
STAGES=${STAGES:-env sync ctl fix ovh}
{
for st in $STAGES; do
  s=$(date +%s); echo "== $st (left $(left)s)"
  case $st in
  env)
    python3 -c 'import sys,torch;print(sys.version);print("torch",torch.__version__,torch.version.cuda,torch.cuda.get_device_name(0))'
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
    nsys profile --help | grep -i -A3 -- '--pytorch\|--osrt-threshold' ;;
  sync)
    for b in nsys torch; do
      timeout $(left) python3 -m tracelab record sync_pitfalls --variant all --backend $b --quick --out $W/runs \
        > $W/logs/sync_pitfalls-all-$b.log 2>&1
      echo "   sync_pitfalls $b rc=$?"
    done ;;
  ctl)
    timeout $(left) python3 - $W/ctl > $W/logs/ctl.log 2>&1 <<'PY'
import sys
from tracelab.record.workload import record_workload
for v in ("item_every_step", "synchronize_in_loop"):
    print(record_workload("sync_pitfalls", v, "nsys", True, sys.argv[1], pytorch_host=False))
PY
    echo "   ctl rc=$?" ;;
  fix)
    for b in nsys torch; do
      timeout $(left) python3 -m tracelab record --backend $b --out $W/fix -- python3 tests/data/programs/host_blocked.py \
        > $W/logs/fix-$b.log 2>&1
      echo "   fix $b rc=$?"
    done ;;
  ovh)
    for prog in train_plain host_blocked; do
      mkdir -p $W/ovh/$prog-plain
      TRAIN_PLAIN_STEPS=40 HOST_BLOCKED_STEPS=40 TRACELAB_RUN_DIR=$W/ovh/$prog-plain timeout $(left) \
        python3 tests/data/programs/$prog.py > $W/ovh/$prog-plain/out.txt 2>&1
      echo "   $prog plain rc=$?"
      for rep in 1 2; do
        for osrt in 0 1; do
          [ $(left) -lt 45 ] && { echo "   out of time before $prog rep $rep osrt $osrt"; continue; }
          TRAIN_PLAIN_STEPS=40 HOST_BLOCKED_STEPS=40 timeout $(left) python3 - $W/ovh/$prog-r$rep-osrt$osrt $osrt $prog <<'PY'
import sys, time
from pathlib import Path
from tracelab.record.command import record_command
t = time.perf_counter()
run = record_command(["python3", f"tests/data/programs/{sys.argv[3]}.py"], "nsys", Path(sys.argv[1]),
                     pytorch_host=False, os_calls=sys.argv[2] == "1")
print(run, "record_command wall s", round(time.perf_counter() - t, 2))
PY
          echo "   $prog rep $rep osrt $osrt rc=$?"
        done
      done
    done
    python3 - $W <<'PY'
import json, statistics, sys
from pathlib import Path
w = Path(sys.argv[1])
for m in sorted(w.glob("ovh/*/program_meta.json")) + sorted(w.glob("ovh/*/*/meta.json")):
    d = json.loads(m.read_text())
    p = d["program"] if isinstance(d.get("program"), dict) else d  # run meta.json, or program_meta.json
    if "per_step" in p:
        ms = [s["step_ms"] for s in p["per_step"][2:]]
        p = {"median_step_ms_after_warmup": round(statistics.median(ms), 4)}
    print(m.relative_to(w), "median_step_ms_after_warmup", p.get("median_step_ms_after_warmup"),
          "nsys_host", d.get("nsys_host"))
for t in sorted(w.glob("**/trace.sqlite")):
    print(t.relative_to(w), t.stat().st_size)
PY
    ;;
  esac
  echo "   $st $(( $(date +%s) - s ))s"
done
} > $W/logs/session.txt 2>&1
