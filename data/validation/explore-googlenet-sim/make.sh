#!/bin/bash
# GoogLeNet explore on the calibrated sim board (re-fitted, issue 12), on a host fast enough for it (16 cores).
set -o pipefail
cd "$(dirname "$0")"
H=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$H/src PYTHONUNBUFFERED=1 COUPPROF_CACHE=/tmp/coupprof-cache
C="python3 -m profiler"
W=/tmp/w; rm -rf $W; mkdir -p $W; cd $W; cp $H/dv-*.csv .
nproc; python3 -c "import numpy, pandas, rich; print(numpy.__version__, pandas.__version__)"
$C zoo googlenet -o goog.tflite && sha256sum goog.tflite
CUTS=3,7,15,24,32,40,48,56,65,73
t0=$(date +%s)
$C sweep --board sim --model goog.tflite --cuts $CUTS --processors L,B,G --freqs max --frames 3 --warmup 1 --method fused --budget-s 6 --min-rounds 5 -o swf-goog 2>&1 | grep -v "^\s*$" | tail -5
echo "sweep $(( $(date +%s) - t0 )) s"; t0=$(date +%s)
$C transfer-matrix --board sim --model goog.tflite --cuts $CUTS --processors L,B,G --method fused --frames 3 --warmup 1 --csv tmf-goog.csv 2>&1 | tail -12
echo "tm $(( $(date +%s) - t0 )) s"
T="--sweep swf-goog --transfers tmf-goog.csv --delays dv-L.csv,dv-B.csv,dv-G.csv --model goog.tflite"
$C explore $T --mode switch --objective latency --csv g-lat.csv --top 1 --measure 1 --frames 60 2>&1 | tail -22
$C explore $T --mode pipeline --objective fps --csv g-pipe.csv --top 1 --measure 1 --frames 60 2>&1 | tail -22
R="--board sim --model goog.tflite --cuts $CUTS --frames 60 --warmup 5 --no-predict --mode switch"
for s in L11@6 B11@8 G11@5; do o=${s%@*}; f=${s#*@}; $C run --order $o --freq $f $R --csv r-$o.csv 2>&1 | grep -E "latency_ms_mean|throughput_fps|energy_mj " | sed "s/^/$s /"; done
ord=$(python3 -c "import pandas as p; r=p.read_csv('g-lat.csv').iloc[0]; print(r['order'], r['freq'])")
set -- $ord
for i in 2 3; do $C run --order $1 --freq $2 $R --csv r-pick-$i.csv 2>&1 | grep -E "latency_ms_mean|throughput_fps|energy_mj " | sed "s/^/pick-$i /"; done
ordp=$(python3 -c "import pandas as p; r=p.read_csv('g-pipe.csv').iloc[0]; print(r['order'], r['freq'])")
set -- $ordp
$C run --order $1 --freq $2 --board sim --model goog.tflite --cuts $CUTS --frames 60 --warmup 5 --no-predict --mode pipeline --csv r-ppick-2.csv 2>&1 | grep -E "latency_ms_mean|throughput_fps|energy_mj " | sed "s/^/ppick-2 /"
$C run --order L11 --freq 6 --board sim --model goog.tflite --cuts $CUTS --frames 60 --warmup 5 --no-predict --mode pipeline --csv r-pL11.csv 2>&1 | grep -E "latency_ms_mean|throughput_fps|energy_mj " | sed "s/^/pL11 /"
tar czf $OUT/goog.tgz swf-goog tmf-goog.csv tmf-goog.json g-*.csv g-*.json r-*.csv r-*.json
ls -la $OUT
