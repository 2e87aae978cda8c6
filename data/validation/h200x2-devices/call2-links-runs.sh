#!/bin/bash
# Call 2 on the two-GPU host: the link table, predictions and measured runs of ResNet50 split
# over the two devices (tables from call 1, carried in .gl2/tables).
source data/validation/h200x2-devices/device-setup.sh  # (was these lines inline when run)
nvidia-smi dmon -s pu -o T > $OUT/dmon-b.txt 2>&1 &
$C zoo resnet50 -o /tmp/resnet50.tflite >/dev/null
D=.gl2/h200x2.toml; L="--layers d0=.gl2/tables --layers d1=.gl2/tables"
T0=$(date +%s)
which mpiexec; date +%T; timeout 120 $C transfer-matrix --devices $D --model /tmp/resnet50.tflite --frames 10 --csv $OUT/links.csv 2>&1 | tail -12
echo "links $(( $(date +%s) - T0 )) s"
for spec in "d0:G27 d1:G27|pipeline" "d0:G27 d1:G27|switch" "d0:B27 d1:G27|pipeline" "d0:G40 d1:G14|pipeline"; do
  order=${spec%|*}; mode=${spec#*|}; tag=$(echo "$order-$mode" | tr ' :' '_-')
  echo "=== $order $mode"
  $C predict --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode $L --links $OUT/links.csv --json $OUT/pred-$tag.json 2>&1 | tail -9
  date +%T; timeout 120 $C run --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode --frames 200 --warmup 10 --csv $OUT/run-$tag.csv 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -8
done
kill %1
