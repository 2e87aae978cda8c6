#!/bin/bash
# As it ran on the H100 device machine (2026-11-25): beside it .whl/ (ai-edge-litert 2.3.0
# and its pure-Python wheels for Python 3.12), src/ (git archive of main at
# 4b99200) and stat.py one level up from src/. $OUT receives
# calls.json.gz; the run's stage line is printed.
set -o pipefail
cd "$(dirname "$0")"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 COUPPROF_CACHE=/tmp/coupprof-cache COLUMNS=200
cd src
mkdir -p /tmp/b && cat > /tmp/b/split.toml <<'T'
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
python3 ../stat.py $OUT/calls.json /tmp/b/split.toml 2>&1 | grep -v "^W0000\|^I0000\|INFO"
M=$(python3 -c "from profiler import zoo; print(zoo.model_path('resnet50', size=224))")
python3 -m profiler run --board /tmp/b/split.toml --model $M --order B54 --mode switch --no-predict --frames 400 --warmup 20 --csv /tmp/b/r.csv 2>&1 | grep -E "^\s+0\s+B"
gzip $OUT/calls.json
