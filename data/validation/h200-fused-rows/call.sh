#!/bin/bash
# Issue 26's per-table checks on G, on the lent nvidia-h200 machine, every prefix loaded at
# once (--loaded-mb 0: the GPU's clock moves between blocks otherwise). Run from the
# repository root with the wheels in .whl/ and the Vulkan loader's debs in .gl/ carried.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
O=${OUT:-out}/fr; mkdir -p "$O"
common=(--loaded-mb 0 --power none --frames 3)
timeout 150 python3 benchmarks/fused_rows_check.py --board host --processors G --models default,mobilenet_v1 \
    --repeats 1 --out "$O" --summary "$O/small.json" -- "${common[@]}" --budget-s 30
timeout 230 python3 benchmarks/fused_rows_check.py --board host --processors G --models resnet50 \
    --repeats 1 --out "$O" --summary "$O/resnet50.json" -- "${common[@]}" --budget-s 90
rm -f "$O"/*.tflite
