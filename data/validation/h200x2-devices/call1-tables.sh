#!/bin/bash
# Call 1 on the two-GPU host: ResNet50's tables (G and B, d0's GPU and cores) and the link table.
set -x
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /tmp/vk/lib /tmp/vk/x; for f in .gl2/*.deb; do dpkg -x $f /tmp/vk/x; done
cp -a /tmp/vk/x/usr/lib/x86_64-linux-gnu/* /tmp/vk/x/lib/x86_64-linux-gnu/* /tmp/vk/lib/ 2>/dev/null; cp -a .gl2/layer /tmp/vk/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH MPI4PY_LIBMPI=/tmp/site/lib/libmpi.so.12
ls $(dirname $(which python3)) | grep -i mpi
C="python3 -m profiler"
$C doctor --devices .gl2/h200x2.toml 2>&1 | tail -5
nvidia-smi dmon -s pu -o T > $OUT/dmon-a.txt 2>&1 &
$C zoo resnet50 -o $OUT/resnet50.tflite
mkdir -p $OUT/tables
T0=$(date +%s)
taskset -c 0-15 $C layers --board host -p G --model $OUT/resnet50.tflite --power nvml:0 --budget-s 60 --csv $OUT/tables/G.csv 2>&1 | tail -25
echo "G table $(( $(date +%s) - T0 )) s"; T0=$(date +%s)
taskset -c 0-15 $C layers --board host -p B --model $OUT/resnet50.tflite --budget-s 60 --csv $OUT/tables/B.csv 2>&1 | tail -25
echo "B table $(( $(date +%s) - T0 )) s"; T0=$(date +%s)
timeout 150 $C transfer-matrix --devices .gl2/h200x2.toml --model $OUT/resnet50.tflite --frames 10 --csv $OUT/links.csv 2>&1 | tail -30
echo "links $(( $(date +%s) - T0 )) s"
kill %1
