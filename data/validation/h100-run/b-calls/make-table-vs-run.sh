#!/bin/bash
# As it ran on the H100 device machine (2026-11-25), beside .whl/ and src/ as
# make-calls.sh; $OUT/res.tgz unpacked is table-vs-run/.
# B on the H100 host: the fused table's whole model against `coupprof run`'s B54, alternated.
set -o pipefail
cd "$(dirname "$0")"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 COUPPROF_CACHE=/tmp/coupprof-cache COLUMNS=200
cd src
R=$OUT/res; mkdir -p $R
cat > $R/split.toml <<'T'
[board]
name = "host-split"
description = "B on cores 0-14"
[processors.L]
kind = "cpu"
name = "core 15"
cores = [15]
[processors.B]
kind = "cpu"
name = "CPU x15 (cores 0-14)"
cores = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
T
M=$(python3 -c "from profiler import zoo; print(zoo.model_path('resnet50', size=224))")
cp=(python3 -m profiler)
for i in 1 2 3; do
  "${cp[@]}" layers --board $R/split.toml --processor B --model $M --method fused --budget-s 15 --frames 10 --csv $R/b$i.csv > $R/layers$i.txt 2>&1
  python3 -c "import json;f=json.load(open('$R/b$i.json'))['fused'];print('layers $i: rounds',f['rounds'],'whole',round(f['whole_ms'],3),'+-',round(f['whole_ms_ci95'],3),'alone',round(f['whole_alone_ms'],3))"
  for mode in switch pipeline; do
    "${cp[@]}" run --board $R/split.toml --model $M --order B54 --mode $mode --layers $R/b$i.csv --frames 200 --warmup 20 --csv $R/run$i-$mode.csv > $R/run$i-$mode.txt 2>&1
    echo "run $i $mode: $(grep -E 'latency_ms_mean' $R/run$i-$mode.txt | tr -s ' ')"
  done
  "${cp[@]}" run --board $R/split.toml --model $M --order B54 --mode switch --method sliced --no-predict --frames 20 --warmup 5 --csv $R/run$i-sliced.csv > $R/run$i-sliced.txt 2>&1
  echo "run $i sliced (54 calls a frame): $(grep -E 'latency_ms_mean' $R/run$i-sliced.txt | tr -s ' ')"
done
tar czf $OUT/res.tgz -C $OUT res && rm -rf $R
