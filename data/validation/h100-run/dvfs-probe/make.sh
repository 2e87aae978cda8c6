#!/bin/bash
# As it ran on the H100 device machine: beside it .gl/ (the Vulkan loader debs), .whl/
# (ai-edge-litert 2.3.0 and its pure-Python wheels for Python 3.12), src/ (git archive of
# the checkout), and dvfs.py one level up from src/. $OUT receives smi.csv, log.txt and
# dvfs-MODEL.json. Usage: make.sh mobilenet_v1
set -o pipefail
cd "$(dirname "$0")"
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,pstate --format=csv -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
cd src
for m in "$@"; do
  timeout 200 python3 ../dvfs.py $OUT/dvfs-$m.json $m 2>&1 | grep -v "^INFO\|^WARNING" | tee -a $OUT/log.txt
done
kill $SMI
