#!/bin/bash
# Issue 10: probe.py on MobileNetV1 224 and the default model (see its docstring). Run
# from the repository root on the device machine, with .gl/ and .whl/ carried (as
# ../inprocess/make.sh). $OUT receives log.txt.
set -o pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export COUPPROF_CACHE=/tmp/coupprof-cache
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 data/validation/h100-run/visit-length/probe.py mobilenet_v1 224 ${BUDGET:-15} ${REPEATS:-2}
python3 data/validation/h100-run/visit-length/probe.py mobilenet_v1 128 ${BUDGET:-15} ${REPEATS:-2} 0.25
} 2>&1 | grep -v "^INFO\|^WARNING" | tee $OUT/log.txt
