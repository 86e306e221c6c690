#!/usr/bin/env bash
# Issue 10 (steps without markers): record the plain training loop (programs/train_plain.py) under
# both backends with `tracelab record`, and measure what nsys --pytorch=autograd-nvtx costs.
# Run from the repo root on the GPU machine, with OUT set; wheels in ${WHL:-.whl}, nsys libs in
# ${NSYS_LIBS:-.nsys-libs}. Everything lands in $OUT (logs even on failure).
source "$(dirname "$0")/device_env.sh"
export TRACELAB_DB=/tmp/tl_steps.db
W=/tmp/steps; rm -rf $W; mkdir -p $W/logs $W/fix $W/ovh
deadline=$(( $(date +%s) + ${BUDGET_S:-400} ))
left() { echo $(( deadline - $(date +%s) )); }
pack() {
  (cd $W && tar --exclude='*.nsys-rep' -cJf $OUT/steps_runs.tar.xz fix ovh logs 2>/dev/null)
  cp $W/logs/*.txt $OUT/ 2>/dev/null; ls -la $OUT
}
trap pack EXIT
{
  python3 -c 'import sys,torch;print(sys.version);print("torch",torch.__version__,torch.version.cuda,torch.cuda.get_device_name(0))'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
  nsys profile --help | grep -i -A6 -- '--pytorch'
} > $W/logs/env.txt 2>&1
PROG=tests/data/programs/train_plain.py
{
  # 1. the fixtures: 10 steps, the user-facing command, both backends
  for b in nsys torch; do
    s=$(date +%s)
    TRAIN_PLAIN_STEPS=10 timeout $(left) python3 -m tracelab record --backend $b --out $W/fix -- python3 $PROG
    rc=$?; echo "== fixture $b rc=$rc $(( $(date +%s) - s ))s"
    if [ $rc -ne 0 ] && [ $b = nsys ]; then  # keep a fixture even if the host flag broke nsys
      TRAIN_PLAIN_STEPS=10 timeout $(left) python3 -c "from tracelab.record.command import record_command as r; print(r(['python3','$PROG'],'nsys','$W/fix',pytorch_host=False))"
      echo "== fixture nsys without host flag rc=$?"
    fi
  done
  # 2. overhead of --pytorch=autograd-nvtx: 40 steps, no profiler / nsys without / nsys with (twice)
  s=$(date +%s); mkdir -p $W/ovh/plain
  TRAIN_PLAIN_STEPS=40 TRACELAB_RUN_DIR=$W/ovh/plain timeout $(left) python3 $PROG > $W/ovh/plain/out.txt 2>&1
  echo "== plain rc=$? $(( $(date +%s) - s ))s"
  for rep in 1 2; do
    for host in 0 1; do
      [ $(left) -lt 60 ] && { echo "== out of time before rep $rep host $host"; continue; }
      s=$(date +%s)
      TRAIN_PLAIN_STEPS=40 timeout $(left) python3 - $W/ovh/r$rep-h$host $host <<'PY'
import sys, time
from pathlib import Path
from tracelab.record.command import record_command
t = time.perf_counter()
run = record_command(["python3", "tests/data/programs/train_plain.py"], "nsys", Path(sys.argv[1]),
                     pytorch_host=sys.argv[2] == "1")
print(run, "record_command wall s", round(time.perf_counter() - t, 2))
PY
      echo "== overhead rep $rep host $host rc=$? $(( $(date +%s) - s ))s"
    done
  done
  python3 - $W <<'PY'
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
for m in sorted(w.glob("**/program_meta.json")) + sorted(w.glob("**/meta.json")):
    d = json.loads(m.read_text())
    p = d.get("program", d)
    print(m.relative_to(w), "median_step_ms_after_warmup", p.get("median_step_ms_after_warmup"),
          "nsys_host", d.get("nsys_host", {}).get("flags"))
for t in sorted(w.glob("**/trace.*")):
    print(t.relative_to(w), t.stat().st_size)
PY
} > $W/logs/record_steps.txt 2>&1
