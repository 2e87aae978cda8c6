#!/bin/bash
# Issue 10: B's fused windows on the H100's host with the caches a timed call finds warm
# (left by the visit's previous call) and cold (the last-level cache emptied first:
# FusedSettings.cache, profiler/measure/cpu_cache.py). ResNet50/224 in windows of 3 (lead 6) on
# B's 15 cores of the host-split profile. STEP=layers: `coupprof layers` both ways (the
# fused sum beside the whole model in the same rounds and alone); STEP=run: `coupprof run
# --order B54 --mode switch` both ways (its prediction from the fused table it measures,
# against its own frames). Run from the repository root on the device machine, with .gl/
# and .whl/ carried (as ../inprocess/make.sh). $OUT receives <step>.tgz and <step>.txt.
set -o pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 COLUMNS=200
export COUPPROF_CACHE=/tmp/coupprof-cache
STEP=${STEP:-layers}; BUDGET=${BUDGET:-45}
R=$OUT/$STEP; mkdir -p $R
B=data/validation/h100-run/host-split-11/host-split.toml
RN=$(python3 -c "from profiler import zoo; print(zoo.model_path('resnet50', size=224))")
{
nproc; lscpu | grep -E "Model name|L2|L3"
for d in /sys/devices/system/cpu/cpu0/cache/index*; do echo "cpu0 $(basename $d): L$(cat $d/level) $(cat $d/type) $(cat $d/size) shared $(cat $d/shared_cpu_list)"; done
for cache in ${CACHES:-warm cold}; do
  name=$STEP-B-$cache; t0=$(date +%s)
  if [ $STEP = layers ]; then
    python3 -m profiler layers --board $B --processor B --model $RN --method fused --window 3 \
        --cache $cache --budget-s $BUDGET --frames 10 --warmup 2 --power none \
        --csv $R/$name.csv > $R/$name.txt 2>&1
  else
    python3 -m profiler run --board $B --model $RN --order B54 --mode switch --window 3 \
        --cache $cache --budget-s $BUDGET --frames 60 --warmup 10 --csv $R/$name.csv > $R/$name.txt 2>&1
  fi
  echo "$name rc=$? $(( $(date +%s) - t0 )) s $(python3 - $STEP $R/$name.csv $R/$name.json <<'PY'
import csv, json, sys
step, path, meta = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
if step == "layers":
    f = meta["fused"]
    s = f["layer_sum_ms"] + f["fixed_ms"]
    print(f"cache {f['cache']} evict {f['evict_bytes'] >> 20} MiB rounds {f['rounds']}: sum+fixed {s:.3f} ms, "
          f"whole in rounds {f['whole_ms']:.3f} ({s / f['whole_ms']:.3f}), whole alone "
          f"{f['whole_alone_ms']:.3f} ({s / f['whole_alone_ms']:.3f}), mean alone {f['whole_alone_mean_ms']:.3f}")
else:
    rows = list(csv.DictReader(open(path)))
    s = {r['metric']: r for r in rows if r['kind'] == 'summary'}
    lat, fps = s['latency_ms_mean'], s['throughput_fps']
    print(f"lat {float(lat['measured']):.3f}/{float(lat['predicted']):.3f} ({float(lat['error_pct']):+.1f} %) "
          f"fps {float(fps['measured']):.1f}/{float(fps['predicted']):.1f} ({float(fps['error_pct']):+.1f} %)")
PY
)"
done
} 2>&1 | grep -v "^INFO\|^WARNING" | tee $OUT/$STEP.txt
tar czf $OUT/$STEP.tgz -C $OUT $STEP && rm -rf $R
