#!/bin/bash
# As it ran on the H100 device machine (2026-11-25): beside it .gl/ (the Vulkan loader
# debs), .whl/ (ai-edge-litert 2.3.0 and its pure-Python wheels for Python 3.12), src/
# (git archive of main at 20c78a3 with pace.patch applied: FusedSettings.pace_calls,
# untimed whole-model calls before every visit; not landed, see README.md), and pace.py
# one level up from src/. $OUT receives log.txt and pace.json.gz.
# Usage: LIMIT=500 make.sh mobilenet_v1,default 8
set -o pipefail
cd "$(dirname "$0")"
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.applications.graphics --format=csv,noheader
cd src
timeout ${LIMIT:-520} python3 ../pace.py $OUT/pace.json "$@" 2>&1 | grep -v "^W0000\|^I0000" | tee $OUT/log.txt
echo "rc=$?"
gzip $OUT/pace.json
