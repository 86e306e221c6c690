#!/usr/bin/env bash
# One GPU-machine session: environment check, GPU tests, recordings, fixtures, nsys export check.
# Everything lands in $OUT (logs even on failure). Stages: STAGES="env test record fixtures export".
set -u
OUT=${OUT:?}
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/tl_ext
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || export PYTHONPATH=$PWD
else export PYTHONPATH=$PWD; fi
W=/tmp/work; mkdir -p $W/logs $W/runs $W/fixtures
STAGES=${STAGES:-env test record fixtures export}
deadline=$(( $(date +%s) + ${BUDGET_S:-520} ))
left() { echo $(( deadline - $(date +%s) )); }
pack() {
  cp $W/logs/*.txt $OUT/ 2>/dev/null
  (cd $W && tar --exclude='*.nsys-rep' -cJf $OUT/runs.tar.xz runs 2>/dev/null)
  (cd $W && tar -cJf $OUT/fixtures.tar.xz fixtures logs 2>/dev/null)
  ls -la $OUT
}
trap pack EXIT
for st in $STAGES; do
  echo "== $st (left $(left)s)"; s=$(date +%s)
  case $st in
  env) { python3 -c 'import sys,torch,triton;print(sys.version);print("torch",torch.__version__,torch.version.cuda,torch.cuda.get_device_name(0))
print("triton",triton.__version__)
import importlib.metadata as m
for p in ("cuda-bindings","nvtx","pandas","numpy","orjson","msgspec","click","rich","sqlite-utils","dash","plotly","pyarrow","ijson"):
  try: print(p, m.version(p))
  except Exception as e: print(p, "MISSING")'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nsys --version; nvcc --version | tail -2; } > $W/logs/env.txt 2>&1 ;;
  test) timeout $(left) python3 -m pytest -q tests/test_gpu.py tests/test_workloads.py tests/test_recorded.py > $W/logs/pytest_gpu.txt 2>&1 ;;
  record) BACKENDS=${BACKENDS:-torch nsys} timeout $(left) tests/data/record_all.sh $W ${WORKLOADS:-} > $W/logs/record.txt 2>&1 ;;
  triton_mm) timeout $(left) python3 -m tracelab.record green_contexts --variant green_ctx --backend both --quick \
      --param matmul=triton --out $W/runs > $W/logs/triton_mm.txt 2>&1 ;;
  fullsize) for v in item_every_step deferred_sync; do timeout $(left) python3 -m tracelab.workloads.runner \
      sync_pitfalls $v --out $W/full/$v --backend none > $W/logs/full_$v.txt 2>&1;
      python3 -c "import json;m=json.load(open('$W/full/$v/meta.json'));print('$v',m['params'],m['mean_step_ms'],m['step_wall_ms'])"; done > $W/logs/fullsize.txt 2>&1 ;;
  fixtures) timeout $(left) tests/data/record_fixtures.sh $W/fixtures > $W/logs/fixtures.txt 2>&1 ;;
  export) { r=$(ls $W/runs/*/trace.nsys-rep | head -1); mkdir -p $W/export; cp "$r" $W/export/;
    timeout 120 nsys export --type sqlite --force-overwrite true -o $W/export/exported.sqlite $W/export/trace.nsys-rep;
    echo rc=$?; ls -la $W/export; } > $W/logs/export.txt 2>&1 ;;
  esac
  echo "   rc=$? $(( $(date +%s) - s ))s"
done 2>&1 | tee $W/logs/session.txt
