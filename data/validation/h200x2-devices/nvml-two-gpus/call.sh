#!/bin/bash
# Call 2 on the two-GPU host: the link table, predictions and measured runs of ResNet50 split
# over the two devices (tables from call 1, carried in .gl2/tables).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /tmp/vk/lib /tmp/vk/x; for f in .gl2/*.deb; do dpkg -x $f /tmp/vk/x; done
cp -a /tmp/vk/x/usr/lib/x86_64-linux-gnu/* /tmp/vk/x/lib/x86_64-linux-gnu/* /tmp/vk/lib/ 2>/dev/null; cp -a .gl2/layer /tmp/vk/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m zipfile -e .whl/mpich-5.0.2-py3-none-manylinux_2_28_x86_64.whl /tmp/mpich; M=/tmp/mpich/mpich-5.0.2.data/data; chmod +x $M/bin/*
export PYTHONPATH=/tmp/site:$PWD PATH=$M/bin:$PATH MPI4PY_LIBMPI=$M/lib/libmpi.so.12
C="python3 -m profiler"
python3 .gl2/nvsample.py /tmp/nv.csv &
$C zoo resnet50 -o /tmp/resnet50.tflite >/dev/null
D=.gl2/h200x2-nvml.toml; L="--layers d0=.gl2/tables --layers d1=.gl2/tables"
R=/tmp/r; mkdir -p $R
for spec in "d0:G54|switch|1500" "d0:G27 d1:G27|pipeline|2000" "d0:B27 d1:G27|pipeline|2000"; do
  IFS='|' read order mode frames <<< "$spec"; tag=$(echo "$order-$mode" | tr ' :' '_-')
  echo "=== $order $mode"
  $C predict --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode $L --links .gl2/links.csv --json $R/pred-$tag.json 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -9
  timeout 150 $C run --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode --frames $frames --warmup 10 --csv $R/run-$tag.csv 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -7
  sleep 1
done
kill %1; cp /tmp/nv.csv $R/; rm -rf $R/*.ranks; tar -C /tmp -czf $OUT/nvml-runs.tgz r
