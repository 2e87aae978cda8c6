#!/bin/bash
# On the one-H200 host: ResNet50 on one device, its power the GPU's NVML counter
# (predictions from call 1's tables, carried in .gl2/tables).
source data/validation/h200x2-devices/device-setup.sh  # (was these lines inline when run)
python3 .gl2/nvsample.py /tmp/nv.csv &
$C zoo resnet50 -o /tmp/resnet50.tflite >/dev/null
D=.gl2/h200x1-nvml.toml; L="--layers d0=.gl2/tables"
R=/tmp/r; mkdir -p $R
for spec in "d0:G54|switch|1500" "d0:B27G27|pipeline|2000"; do
  IFS='|' read order mode frames <<< "$spec"; tag=$(echo "$order-$mode" | tr ' :' '_-')
  echo "=== $order $mode"
  $C predict --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode $L --json $R/pred-$tag.json 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -9
  timeout 150 $C run --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode --frames $frames --warmup 10 --csv $R/run-$tag.csv 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -7
  sleep 1
done
kill %1; cp /tmp/nv.csv $R/; rm -rf $R/*.ranks; tar -C /tmp -czf $OUT/nvml-runs.tgz r
