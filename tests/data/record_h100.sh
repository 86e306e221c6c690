#!/usr/bin/env bash
# Issue 14: record workloads on the GPU machine through the real CLI (`python3 -m tracelab record`),
# one variant per command, torch then nsys, under a deadline; logs and runs land in $OUT even on failure.
# Usage (from a copy of the repo next to ../.whl and ../.nsys-libs):
#   JOBS="default_stream:legacy_blocking:torch ..." BUDGET_S=540 tests/data/record_h100.sh
# A job is WORKLOAD:VARIANT:BACKEND; VARIANT "all" records every variant in one command.
set -u
OUT=${OUT:?}
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/../.nsys-libs:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/tl_ext TRACELAB_DB=/tmp/tl.db
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || export PYTHONPATH=$PWD
W=/tmp/work; mkdir -p $W/logs $W/runs
deadline=$(( $(date +%s) + ${BUDGET_S:-540} ))
left() { echo $(( deadline - $(date +%s) )); }
pack() {
  (cd $W && tar --exclude='*.nsys-rep' -cJf $OUT/runs.tar.xz runs logs 2>/dev/null)
  cp $W/logs/session.txt $OUT/ 2>/dev/null
  ls -la $OUT
}
trap pack EXIT
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch,triton;print("torch",torch.__version__,torch.version.cuda,torch.cuda.get_device_name(0),"triton",triton.__version__)'
  nsys --version
} > $W/logs/env.txt 2>&1
if [ -n "${PREWARM:-}" ]; then  # compile the load_inline extensions while the GPU records
  (python3 -c "from tracelab.workloads import fusion, graphs; fusion.cuda_extension(); graphs.conditional_extension(); print('prewarm ok')" \
     > $W/logs/prewarm.txt 2>&1 &)
fi
for job in ${JOBS:?}; do
  IFS=: read -r w v b <<< "$job"
  need=${MIN_LEFT:-25}
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $job (left $(left)s)"; continue; fi
  s=$(date +%s)
  echo "\$ python3 -m tracelab record $w --variant $v --backend $b --quick --out $W/runs" > $W/logs/$w-$v-$b.log
  timeout $(left) python3 -m tracelab record "$w" --variant "$v" --backend "$b" --quick --out $W/runs \
    >> $W/logs/$w-$v-$b.log 2>&1
  echo "$job rc=$? $(( $(date +%s) - s ))s"
done 2>&1 | tee $W/logs/session.txt
