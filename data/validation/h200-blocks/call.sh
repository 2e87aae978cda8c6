#!/bin/bash
# Issue 26: ResNet50 224 on G in blocks of prefixes (the default --loaded-mb 384), the
# blocks tied by their anchors (profiler.measure.fused.chain_blocks), twice, with NVML's
# energy; then B (16 host cores) once, also in blocks. On the lent nvidia-h200 machine,
# from the repository root with the wheels in .whl/ and the Vulkan loader's debs in .gl/.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
O=${OUT:-out}/blocks; mkdir -p "$O"
timeout 400 python3 benchmarks/fused_rows_check.py --board host --processors G --models resnet50 \
    --repeats 2 --out "$O" --summary "$O/G.json" -- --power nvml --frames 3 --budget-s 60
timeout 170 python3 benchmarks/fused_rows_check.py --board host --processors B --models resnet50 \
    --repeats 1 --out "$O" --summary "$O/B.json" -- --power none --frames 3 --budget-s 60
rm -f "$O"/*.tflite
