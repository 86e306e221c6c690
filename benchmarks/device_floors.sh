#!/bin/bash
# Run on the lent GPU machine (16 cores): run(command="bash benchmarks/device_floors.sh", carry=[".devbench"]).
# .devbench (ignored by git) holds what that machine lacks: whl/ (orjson, msgspec, sqlite-utils, sqlite-fts4,
# click, click-default-group, isal; HTA = traceinsight + networkx, pydot, pyparsing, plotly, narwhals),
# df_index_resolver__df_index_resolver.json.gz and perlmutter-cloverleaf-cuda.sqlite from ../shared/corpus,
# and base896.tar.gz (git archive 896d260 tracelab app setup.py pyproject.toml ':(exclude)tracelab/demo_runs').
# device benchmark 2: Kineto 54 MB / x4 with HTA, x16 vs 896d260, x64, nsys 1M kernels
set -u
cd "$(dirname "$0")/.."
D=${DEVBENCH:-.devbench}
python3 -m pip install -q --no-index --no-deps --no-cache-dir $D/whl/*.whl && export PYTHONPATH=$PWD || exit 3
# That machine sets PYTHONDONTWRITEBYTECODE=1 and its numpy / pandas have no .pyc: every process would compile
# them from source (0.5 s of numpy alone per run, HTA's pandas more). Byte-compile them once, as `pip install`
# does on a usual machine, so that both tools start as installed packages do.
SP=$(python3 -c "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))")
for m in numpy pandas click hta networkx pydot pyparsing plotly narwhals dateutil pytz sqlite_utils sqlite_fts4 click_default_group isal tabulate; do
  [ -e $SP/$m ] && python3 -m compileall -q -j 0 $SP/$m > /dev/null 2>&1; done
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1 || { tail -20 $OUT/install.log; exit 4; }
mkdir -p /tmp/b896 && tar xzf $D/base896.tar.gz -C /tmp/b896 && (cd /tmp/b896 && python3 setup.py build_ext --inplace > $OUT/b896_build.log 2>&1; ls tracelab/*.so >> $OUT/b896_build.log)
python3 -m compileall -q /tmp/b896/tracelab tracelab > /dev/null  # both versions start from .pyc
nproc; uptime; python3 -V
STAGES=${STAGES:-"54 x4 x16 x64 nsys"}
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
T=$D/df_index_resolver__df_index_resolver.json.gz
has 54 && python3 benchmarks/bench_parse.py $T --hta-python python3 --repeat ${REPEAT54:-5} --baseline '' 2>&1 | tee $OUT/bench54.txt | tail -5
if has x4; then
python3 benchmarks/make_big_kineto.py $T /tmp/x4.json --copies 4 > /dev/null
python3 benchmarks/bench_parse.py /tmp/x4.json --hta-python python3 --repeat 2 --baseline '' 2>&1 | tee $OUT/bench_x4.txt | tail -5
fi
if has x16; then
python3 benchmarks/make_big_kineto.py $T /tmp/x16.json --copies 16 > /dev/null
python3 benchmarks/ab_analyze.py /tmp/x16.json /tmp/b896 $PWD ${X16_ROUNDS:-2} 2>&1 | tee $OUT/ab_x16.txt
fi
rm -f /tmp/x4.json /tmp/x16.json
if has x64; then
python3 benchmarks/make_big_kineto.py $T /tmp/x64.json --copies 64 > /dev/null
python3 benchmarks/bench_parse.py /tmp/x64.json --repeat 1 --baseline '' 2>&1 | tee $OUT/bench_x64.txt | tail -4
rm -f /tmp/x64.json
fi
if has nsys; then
python3 benchmarks/make_big_nsys.py --source $D/perlmutter-cloverleaf-cuda.sqlite --out /tmp/big_nsys.sqlite > $OUT/make_nsys.log 2>&1
python3 benchmarks/bench_nsys.py /tmp/big_nsys.sqlite --repeats 1 2>&1 | tee $OUT/bench_nsys.txt | tail -12
fi
uptime
