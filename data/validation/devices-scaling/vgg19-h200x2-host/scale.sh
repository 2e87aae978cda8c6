#!/bin/bash
# VGG-19 on 1, 2 and 4 simulated boards, each with 4 host cores of its own (no two share
# a core): tables once, a link table per device count, explore's best split, then a run.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m zipfile -e .whl/mpich-5.0.2-py3-none-manylinux_2_28_x86_64.whl /tmp/mpich; M=/tmp/mpich/mpich-5.0.2.data/data; chmod +x $M/bin/*
export PYTHONPATH=/tmp/site:$PWD PATH=$M/bin:$PATH MPI4PY_LIBMPI=$M/lib/libmpi.so.12
C="python3 -m profiler"; F="--model /tmp/vgg19.tflite"
S=/tmp/scaling; mkdir -p $S/tables
t() { echo "[$(date +%T)] $*"; }
$C zoo vgg19 -o /tmp/vgg19.tflite | tail -1
t tables; taskset -c 0-3 $C layers --board sim -p B $F --frames 2 --warmup 0 --power sim --csv $S/tables/B.csv 2>&1 | tail -2
taskset -c 0-3 $C layers --board sim -p G $F --method sliced --frames 2 --warmup 0 --power sim --csv $S/tables/G.csv 2>&1 | tail -2
t one; timeout 120 $C run --devices .gl2/sim2x.toml $F --order 'd0:G19' --mode pipeline --frames 8 --warmup 1 --csv $S/vgg19-1dev.csv 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -5
for n in 2 4; do
  D=.gl2/sim${n}x.toml; L=""; for ((i=0;i<n;i++)); do L="$L --layers d$i=$S/tables"; done
  t links $n; timeout 150 $C transfer-matrix --devices $D $F --frames 3 --warmup 1 --csv $S/links-${n}dev.csv 2>&1 | grep -A3 "^  link" | head -8
  t explore $n; $C explore --devices $D $L --links $S/links-${n}dev.csv $F --mode pipeline --csv $S/explore-${n}dev.csv 2>&1 | tail -12
  order=$(python3 -c "import csv; r=[x for x in csv.DictReader(open('$S/explore-${n}dev.csv')) if x['kind']=='front']; print(max(r, key=lambda x: float(x['throughput_fps']))['order'])")
  t run $n "$order"; timeout 150 $C run --devices $D $F --order "$order" --mode pipeline --frames 8 --warmup 1 --csv $S/vgg19-${n}dev.csv 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -8
done
rm -rf $S/*.ranks $S/tables/*.trace; tar -C /tmp -czf $OUT/scaling.tgz scaling; t done
