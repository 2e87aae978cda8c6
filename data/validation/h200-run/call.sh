#!/bin/bash
# Issue 26's `run` predictions on the lent nvidia-h200 machine: fused G and B tables, the
# B<->G transfer matrix, then `coupprof run` of G-only, B-only, B7G8-style and G7B8-style
# orders, switch and pipeline, each beside its prediction (benchmarks/validation_gpu.py,
# phase `mapped`). Run from the repository root with .whl/ and .gl/ carried; MODEL is
# mobilenet_v1 or resnet50.
MODEL=${1:?mobilenet_v1 or resnet50}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
O=${OUT:-out}/$MODEL; mkdir -p "$O"
timeout 560 python3 benchmarks/validation_gpu.py --out "$O" --only mapped --models "$MODEL"
rm -f "$O"/*.tflite
