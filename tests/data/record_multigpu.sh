#!/usr/bin/env bash
# Issues 24/25/29/27: multi-GPU and input-pipeline recordings on a GPU machine of 2+ GPUs.
# Run from the repo root with OUT set; wheels in .whl, nsys importer libs in .nsys-libs.
#   JOBS="comm ddp2 ddp4 ..." tests/data/record_multigpu.sh
# Every job goes through the real CLI (`python3 -m tracelab record ...`); logs land in $OUT even on failure.
source "$(dirname "$0")/device_env.sh"
export TRACELAB_DB=/tmp/tl_multi.db NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W=/tmp/multi; mkdir -p $W/logs $W/runs
deadline=$(( $(date +%s) + ${BUDGET_S:-540} ))
left() { echo $(( deadline - $(date +%s) )); }
P=tests/data/programs
TL="python3 -m tracelab record"
pack() {
  cp $W/logs/*.txt $OUT/ 2>/dev/null
  for g in ${JOBS}; do
    [ -d $W/runs/$g ] && (cd $W/runs && tar --exclude='*.nsys-rep' -cJf $OUT/$g.tar.xz $g 2>/dev/null)
  done
  ls -la $OUT
}
trap pack EXIT
job() {  # job NAME CMD...: one recording, its log, its exit code and time
  local name=$1; shift; local s=$(date +%s)
  if [ $(left) -lt 20 ]; then echo "== $name skipped: out of time"; return; fi
  timeout $(left) "$@" > $W/logs/$name.txt 2>&1
  echo "== $name rc=$? $(( $(date +%s) - s ))s"
}
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; nsys --version
  python3 -c 'import torch;print("torch",torch.__version__,torch.cuda.device_count())'
  for j in $JOBS; do
    mkdir -p $W/runs/$j
    case $j in
    gputest) job gputest python3 -m pytest -q -p no:cacheprovider tests/test_gpu_multirank.py ;;
    comm) for b in nsys torch; do job comm_$b $TL comm_overlap --variant all --backend $b --quick --out $W/runs/comm; done ;;
    ddp2) for b in torch nsys; do job ddp2_$b $TL --backend $b --out $W/runs/ddp2 -- torchrun --standalone --nproc-per-node=2 $P/ddp_straggler.py --steps 15 --straggle-ms ${STRAGGLE_MS:-40}; done ;;
    ddp2loader) for b in torch nsys; do job ddp2loader_$b $TL --backend $b --out $W/runs/ddp2loader -- torchrun --standalone --nproc-per-node=2 $P/ddp_straggler.py --steps 12 --mode loader --straggle-ms 25; done ;;
    ddp4) for b in torch nsys; do job ddp4_$b $TL --backend $b --out $W/runs/ddp4 -- python3 -m torch.distributed.run --standalone --nproc-per-node=4 $P/ddp_straggler.py --steps 12 --slow-rank 2 --straggle-ms ${STRAGGLE_MS:-40}; done ;;
    copy) for m in pageable pinned; do for b in torch nsys; do job copy_${m}_$b $TL --backend $b --out $W/runs/copy/$m -- python3 $P/copy_loop.py --memory $m; done; done ;;
    loader) for b in torch nsys; do job loader_$b $TL --backend $b --out $W/runs/loader -- python3 $P/loader_stall.py; done ;;
    loaderddp) for b in torch nsys; do job loaderddp_$b env LOADER_DDP=1 $TL --backend $b --out $W/runs/loaderddp -- torchrun --standalone --nproc-per-node=2 $P/loader_stall.py; done ;;
    gpt2) for b in torch nsys; do job gpt2_$b $TL --backend $b --out $W/runs/gpt2 -- python3 $P/gpt2_loop.py --steps 10; done ;;
    memory) job memory_torch env TRACELAB_PROFILE_MEMORY=1 $TL --backend torch --out $W/runs/memory -- python3 $P/train_plain.py
            job memory_nsys python3 -c "from tracelab.record.command import record_command as r; print(r(['python3','$P/train_plain.py'],'nsys','$W/runs/memory',nsys_extra=('--cuda-memory-usage=true',)))" ;;
    ncclpayload) job ncclpayload_record $TL --backend nsys --out $W/runs/ncclpayload -- torchrun --standalone --nproc-per-node=2 $P/ddp_straggler.py --steps 4
       { nsys export --help | grep -i -B1 -A3 json; r=$(ls $W/runs/ncclpayload/*/trace.nsys-rep | head -1);
         nsys export --type sqlite --include-json true --force-overwrite true -o $W/runs/ncclpayload/payload.sqlite "$r"; echo rc=$?;
         python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute(\"select count(*), min(jsonText) from NVTX_EVENTS where jsonText is not null\").fetchall())" $W/runs/ncclpayload/payload.sqlite;
         rm -f $W/runs/ncclpayload/*/trace.sqlite; } > $W/logs/ncclpayload_export.txt 2>&1 ;;
    input) for b in torch nsys; do job input_$b $TL input_pipeline --variant all --backend $b --quick --out $W/runs/input; done ;;
    memwl) for b in torch nsys; do job memwl_$b $TL sync_pitfalls --variant keep_outputs --backend $b --quick --out $W/runs/memwl; done ;;
    esac
  done
} 2>&1 | tee $W/logs/session.txt
