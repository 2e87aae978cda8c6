#!/bin/bash
# Issue 10: the fused-vs-sliced-vs-whole table on the H100, with prefix energies (NVML).
# As it ran on the device machine: beside it .gl/ (the Vulkan loader debs), .whl/
# (ai-edge-litert 2.3.0 and its pure-Python wheels for Python 3.12) and src/ (git archive
# of the checkout). Usage: make.sh --models default,mobilenet_v1,resnet50 \
#     --fused-budget-s 25 --frames 20 --energy-updates 5   (with LIMIT=560)
set -o pipefail
cd "$(dirname "$0")"
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 200 > $OUT/smi.csv 2>&1 &
SMI=$!
cd src
timeout ${LIMIT:-540} python3 benchmarks/validation_gpu.py --out $OUT/v --only fused "$@" 2>&1 | grep -v "^INFO\|^WARNING" | tee $OUT/log.txt
echo "validation rc=$?"
kill $SMI; mv $OUT/smi.csv $OUT/v/ 2>/dev/null
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
