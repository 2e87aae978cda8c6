#!/bin/bash
# Issue 26: what the block ties rest on, and run's counter window. On the lent nvidia-h200
# machine, from the repository root with .whl/ and .gl/ carried:
# 1. ResNet50 224 on G in blocks (the default --loaded-mb 384), and with every prefix
#    loaded at once (--loaded-mb 4096): both sidecars keep their raw rounds (round_us), so
#    the ties can be checked column by column against the table without blocks;
# 2. `coupprof run` of G54 switch with --power nvml, and without, priced from the
#    blocks' table: the counter window is now awaited with the GPU kept busy.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
O=${OUT:-out}/ties; mkdir -p "$O"
timeout 150 python3 benchmarks/fused_rows_check.py --board host --processors G --models resnet50 \
    --repeats 1 --out "$O/blocks" --summary "$O/blocks/G.json" -- --power none --frames 3 --budget-s 45
timeout 150 python3 benchmarks/fused_rows_check.py --board host --processors G --models resnet50 \
    --repeats 1 --out "$O/loaded" --summary "$O/loaded/G.json" -- --power none --frames 3 --budget-s 45 \
    --loaded-mb 4096
G54=$(printf 'G%.0s' $(seq 54))
for p in nvml none; do
  timeout 120 python3 -m profiler run --board host --model "$O/blocks/resnet50.tflite" --order "$G54" \
      --mode switch --layers "$O/blocks/resnet50-G-1.csv" --power $p --frames 60 --warmup 10 \
      --csv "$O/run-G54-switch-$p.csv" 2>&1 | tail -25
done
rm -f "$O"/*/*.tflite
