# Sourced by the GPU-machine scripts (record_steps.sh, record_gaps.sh): run from the repo root with OUT
# set; wheels in ${WHL:-.whl} (tracelab's dependencies the image lacks), nsys importer libraries in
# ${NSYS_LIBS:-.nsys-libs} (/work/shared/tools/nsys-importer-libs.sh).
set -u
OUT=${OUT:?}
WHL=${WHL:-.whl}; NSYS_LIBS=${NSYS_LIBS:-.nsys-libs}
export LD_LIBRARY_PATH=$(realpath $NSYS_LIBS):${LD_LIBRARY_PATH:-}
export PATH=$PATH:/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $WHL/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || export PYTHONPATH=$PWD
