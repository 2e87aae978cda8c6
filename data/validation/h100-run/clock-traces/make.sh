#!/bin/bash
# Clock traces on the H100 (data/validation/h100-run/clock-traces/): G tables and
# `coupprof run`s of three models, each recording NVML's SM clock; runs after short and
# long warm-ups. Beside it as it ran: .gl/ (the Vulkan loader debs), .whl/ (ai-edge-litert
# 2.3.0 and its pure-Python wheels for Python 3.12), src/ (git archive of the checkout).
# $OUT receives log.txt and out.tgz (every table and run).  Usage: make.sh
set -o pipefail
cd "$(dirname "$0")"
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache COLUMNS=200
R=/tmp/res; mkdir -p $R
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
cd src
python3 -m pytest -q -p no:cacheprovider tests/test_freq_trace.py -k "not run_says and not layers_keeps" 2>&1 | tail -1
cp=(python3 -m profiler)
for m in mobilenet_v1 default resnet50; do
  case $m in
    default) M=$(python3 -c "from profiler import zoo; print(zoo.default_model_path())"); O=G15; B=12;;
    mobilenet_v1) M=$(python3 -c "from profiler import zoo; print(zoo.model_path('mobilenet_v1', size=224))"); O=G15; B=12;;
    resnet50) M=$(python3 -c "from profiler import zoo; print(zoo.model_path('resnet50', size=224))"); O=G54; B=24;;
  esac
  mkdir -p $R/$m
  echo "== $m: coupprof layers --board host --processor G --model M --frames 20 --budget-s $B"
  "${cp[@]}" layers --board host --processor G --model $M --frames 20 --budget-s $B --csv $R/$m/G.csv 2>&1 | grep -E "clock|whole model|wrote" | tail -3
  "${cp[@]}" layers --board host --processor B --model $M --frames 20 --budget-s 8 --csv $R/$m/B.csv 2>&1 | grep -E "wrote" | tail -1
  i=0
  for w in 10 3000 10 3000; do
    i=$((i+1)); sleep 3
    "${cp[@]}" run --board host --model $M --order $O --mode switch --layers $R/$m/G.csv,$R/$m/B.csv --frames 300 --warmup $w --csv $R/$m/run$i-w$w.csv > $R/$m/run$i-w$w.txt 2>&1
    echo "== $m run $i: coupprof run --order $O --mode switch --frames 300 --warmup $w"; grep -E "latency_ms_mean|throughput_fps" $R/$m/run$i-w$w.txt; tr -s ' \n' ' ' < $R/$m/run$i-w$w.txt | grep -o "G ran at [^.]*\. " || echo "(no clock note)"
  done
done
} 2>&1 | tee $OUT/log.txt
tar czf $OUT/out.tgz -C $R .
