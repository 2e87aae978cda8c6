#!/bin/bash
# Issue 26: does holding the GPU busy before each visit (--hold-ms) bring the fused
# rounds to the clock a run's back-to-back frames get? MobileNetV1 224 on G with no hold,
# 5 ms and 20 ms, then ResNet50 224 on G in blocks (default --loaded-mb) with 5 ms, NVML
# energy. On the lent nvidia-h200, from the repository root with .whl/ and .gl/ carried.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
O=${OUT:-out}/hold; mkdir -p "$O"
for h in 0 5 20; do
  timeout 100 python3 benchmarks/fused_rows_check.py --board host --processors G --models mobilenet_v1 \
      --repeats 1 --out "$O/mnv1-hold$h" --summary "$O/mnv1-hold$h.json" -- --power none --frames 3 \
      --budget-s 20 --hold-ms $h
done
timeout 260 python3 benchmarks/fused_rows_check.py --board host --processors G --models resnet50 \
    --repeats 1 --out "$O/r50-hold5" --summary "$O/r50-hold5.json" -- --power nvml --frames 3 \
    --budget-s 45 --hold-ms 5
rm -f "$O"/*/*.tflite
