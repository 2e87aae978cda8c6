#!/bin/bash
# Issue 26's per-table checks on B (all 16 host cores) of the lent nvidia-h200 machine, at
# the fused method's defaults. Run from the repository root with the wheels in .whl/.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nproc; lscpu | grep -E "Model name|L3"
O=${OUT:-out}/fr; mkdir -p "$O"
common=(--power none --frames 3)
timeout 150 python3 benchmarks/fused_rows_check.py --board host --processors B --models default,mobilenet_v1 \
    --repeats 1 --out "$O" --summary "$O/small.json" -- "${common[@]}" --budget-s 30
timeout 300 python3 benchmarks/fused_rows_check.py --board host --processors B --models resnet50 \
    --repeats 1 --out "$O" --summary "$O/resnet50.json" -- "${common[@]}" --budget-s 90
rm -f "$O"/*.tflite
