#!/bin/bash
# Does the run's own driver thread (and its source thread) disturb B's 15 threads?
# The same runs with the process started on core 15 (G's host core; the stage threads
# re-pin themselves to their cores) and without.
set -o pipefail
cd "$(dirname "$0")"
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache COLUMNS=200
R=$OUT/pin; mkdir -p $R
cd src
B=data/validation/h100-run/host-split-9/host-split.toml
RN=$(python3 -c "from profiler import zoo; print(zoo.model_path('resnet50', size=224))")
MN=$(python3 -c "from profiler import zoo; print(zoo.model_path('mobilenet_v1', size=224))")
{
nproc; cat /proc/cpuinfo | grep "model name" | head -1
for rep in 1 2 3; do
  for pin in no yes; do
    pre=""; [ $pin = yes ] && pre="taskset -c 15"
    for spec in "RN B54 switch" "RN B54 pipeline" "RN B27G27 pipeline" "RN G27B27 pipeline" "MN B15 switch" "MN B15 pipeline"; do
      set -- $spec; M=${!1}; O=$2; mode=$3
      name=$1-$O-$mode-pin$pin-$rep
      $pre python3 -m profiler run --board $B --model $M --order $O --mode $mode --frames 100 --warmup 10 --no-predict --csv $R/$name.csv > $R/$name.txt 2>&1
      echo "$name rc=$? $(python3 - $R/$name.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
s = {r['metric']: float(r['measured']) for r in rows if r['kind'] == 'summary' and r['measured']}
st = [f"{r['processor']}{float(r['time_ms_mean']):.3f}" for r in rows if r['kind'] == 'stage']
print(f"lat {s['latency_ms_mean']:.3f} fps {s['throughput_fps']:.1f} stages {' '.join(st)}")
PY
)"
    done
  done
done
} 2>&1 | tee $OUT/log.txt
