#!/bin/bash
# As it ran on the H100 device machine (beside it .gl/, .whl/ and src/, as in
# ../dvfs-probe/make.sh): ResNet50 on G, fused, whole prefixes (--window 0) and windows
# of 6, before settings_for kept whole prefixes on accelerators. Only the JSON sidecars
# are kept (fused.fixed_ms, layer_sum_ms, whole_ms): windows on G are no longer offered.
set -o pipefail
cd "$(dirname "$0")"
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache
cd src
M=$(python3 -c "from profiler import zoo; print(zoo.model_path('resnet50'))")
for w in 0 6; do
  timeout 200 python3 -m profiler layers --board host --processor G --model $M --method fused \
    --window $w --budget-s 15 --frames 5 --warmup 2 --csv $OUT/g-w$w.csv 2>&1 | grep -v "^INFO\|^WARNING" | tail -8
  echo "rc=$?"
done
