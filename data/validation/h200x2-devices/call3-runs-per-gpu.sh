#!/bin/bash
# Call 2 on the two-GPU host: the link table, predictions and measured runs of ResNet50 split
# over the two devices (tables from call 1, carried in .gl2/tables).
source data/validation/h200x2-devices/device-setup.sh  # (was these lines inline when run)
python3 .gl2/nvsample.py $OUT/nv.csv &
$C zoo resnet50 -o /tmp/resnet50.tflite >/dev/null
D=.gl2/h200x2.toml; L="--layers d0=.gl2/tables --layers d1=.gl2/tables"
t0=$(date +%s.%N)
mark() { echo "$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')") $*" >> $OUT/marks.txt; }
for spec in "d0:G54|switch|600" "d1:G54|switch|600" "d0:G27 d1:G27|pipeline|1000" "d0:B27 d1:G27|pipeline|1000"; do
  IFS='|' read order mode frames <<< "$spec"; tag=$(echo "$order-$mode" | tr ' :' '_-')
  echo "=== $order $mode"
  $C predict --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode $L --links .gl2/links.csv --json $OUT/pred-$tag.json 2>&1 | grep -i "throughput\|latency"
  mark start $tag; timeout 120 $C run --devices $D --model /tmp/resnet50.tflite --order "$order" --mode $mode --frames $frames --warmup 10 --csv $OUT/run-$tag.csv 2>&1 | grep -v "WARNING: \[\|INFO: \[" | tail -6; mark end $tag
  sleep 1
done
kill %1; rm -rf $OUT/*.ranks
