#!/bin/bash
# Issue 10: `coupprof run`'s own prediction, from tables it measures in the same process
# right before the run (no --layers/--transfers), on the host-split profile. The earlier
# validations fed `run` tables that separate `coupprof layers` processes had measured
# minutes before; on these machines B's call moves by ~10 % between processes and G's
# clock follows the last seconds' load. Run from the repository root on the device
# machine, with .gl/ (Vulkan loader debs) and .whl/ (ai-edge-litert 2.3.0 and its
# pure-Python wheels for Python 3.12) carried. $OUT receives r.tgz (every run's CSV, JSON
# and output) and log.txt. SPECS and MODES choose the runs (default: all below).
set -o pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 COLUMNS=200
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache
R=$OUT/r; mkdir -p $R
B=data/validation/h100-run/host-split-11/host-split.toml
MN=$(python3 -c "from profiler import zoo; print(zoo.model_path('mobilenet_v1', size=224))")
RN=$(python3 -c "from profiler import zoo; print(zoo.model_path('resnet50', size=224))")
{
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SPECS=${SPECS:-"MN:G15:8 MN:B15:8 MN:B7G8:8 MN:G7B8:8 RN:B54:15"}
for spec in $SPECS; do
  IFS=: read -r m O budget <<< "$spec"; M=${!m}
  for mode in ${MODES:-switch pipeline}; do
    name=$m-$O-$mode${TAG:-}
    t0=$(date +%s.%N)
    python3 -m profiler run --board $B --model $M --order $O --mode $mode --budget-s $budget \
        --frames 60 --warmup 10 --csv $R/$name.csv > $R/$name.txt 2>&1
    rc=$?
    echo "$name rc=$rc $(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f} s')") $(python3 - $R/$name.csv $R/$name.json <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
s = {r['metric']: r for r in rows if r['kind'] == 'summary'}
lat, fps = s['latency_ms_mean'], s['throughput_fps']
notes = json.load(open(sys.argv[2])).get('notes', [])
clock = [n.split(". G's times")[0].split(' (measure')[0] for n in notes if 'MHz median' in n]
print(f"lat {float(lat['measured']):.3f}/{float(lat['predicted']):.3f} ({float(lat['error_pct']):+.1f} %) "
      f"fps {float(fps['measured']):.1f}/{float(fps['predicted']):.1f} ({float(fps['error_pct']):+.1f} %) "
      + ' | '.join(clock))
PY
)"
  done
done
} 2>&1 | grep -v "^INFO\|^WARNING" | tee $OUT/log.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
