#!/bin/bash
# AutoDiCE's scaling figure (Fig. 7) for one model: the same model run on 1, 2 and 4
# simulated boards with `coupprof run --devices`, each number of devices split by the
# fastest mapping `coupprof explore --devices` predicts for it. The runs are what
# notebooks/06_several_boards.ipynb reads (RUNS = the <model>-<N>dev folders below).
#
#   data/validation/devices-scaling/run.sh [MODEL [DEVICES]]
#
# MODEL: a zoo name (`coupprof zoo --list`; built into coupprof's cache, not here), a
# .tflite path, or "default" (the bundled MobileNetV1 0.25). Default: vgg19, AutoDiCE's.
# DEVICES: one devices file for every N (it needs at least max(NS) devices); by default
# DEVICES2 for N <= 2 and DEVICES4 for N > 2.
#
# Settings, from the environment (defaults in brackets):
#   MODEL      as the first argument [vgg19]
#   NS         the numbers of devices [1 2 4]
#   DEVICES2   devices file for N <= 2 [sim2: two sim boards on cores 0 and 1]
#   DEVICES4   devices file for N > 2 [sim4: four sim boards, which SHARE cores 0 and 1 on
#              a 2-core machine; on a machine with 4+ free cores pass one that gives each
#              board its own, e.g. sim4-own-cores.toml beside this script]
#   FRAMES     measured frames per run [20, AutoDiCE's average over 20 inferences]
#   WARMUP     warm-up frames per run [2]
#   MODE       pipeline | switch [pipeline: AutoDiCE's throughput comes from the pipeline]
#   FREQ       --freq SPEC for every run, e.g. 4 or max [none: the boards' own levels]
#   PROCESSORS processors the per-device layer tables cover, so the splits use [B,G]
#   TABLE_FRAMES  frames of those tables [3]
#   TABLE_METHOD  their --method [auto: sliced for a model file over 100 MB, as
#              docs/devices.md measured VGG-19 (the fused method's prefixes of a 575 MB
#              model were not tried on a small machine), else fused: a small model's
#              per-call overhead, which sliced tables count once per layer, would misprice G]
#   TABLES     a folder of layer tables (B.csv, G.csv, ... of `coupprof layers`) to use
#              instead of measuring them; the same tables stand for every device, which
#              holds where every device is the same board (the sim ones)
#   LINKS      a link table (`coupprof transfer-matrix --devices`) for explore [none: the
#              devices file's simulated links price the cuts]
#   ORDER1, ORDER2, ORDER4 ...   an --order for that N, instead of explore's pick
#   OUT        where the folders go [this script's folder]
#   COUPPROF   the command [the checkout's .venv/bin/coupprof, else coupprof on PATH]
#   PY         a Python with coupprof (reads explore's CSV) [.venv/bin/python, else python3]
#
# Writes, per N: $OUT/<model>-<N>dev/ with run.csv + run.json (`run --devices`), run.ranks/
# (each rank's record), explore.csv + explore.json (the candidates the order came from,
# unless ORDER<N> was given), commands.sh (every command as run) and log.txt (their
# output); and $OUT/<model>-tables/ (the layer tables, once per model).
# Memory: a VGG-19 rank peaks at about 3.5 GB RSS (docs/devices.md), so 4 ranks want 14 GB
# free; give the 4-device run a machine with room (and 4 cores for the boards).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
MODEL=${1:-${MODEL:-vgg19}}
if [ $# -ge 2 ]; then DEVICES2=$2; DEVICES4=$2; fi
DEVICES2=${DEVICES2:-sim2}
DEVICES4=${DEVICES4:-sim4}
NS=${NS:-1 2 4}
FRAMES=${FRAMES:-20}
WARMUP=${WARMUP:-2}
MODE=${MODE:-pipeline}
FREQ=${FREQ:-}
PROCESSORS=${PROCESSORS:-B,G}
TABLE_FRAMES=${TABLE_FRAMES:-3}
TABLE_METHOD=${TABLE_METHOD:-auto}
TABLES=${TABLES:-}
LINKS=${LINKS:-}
OUT=${OUT:-$HERE}
if [ -z "${COUPPROF:-}" ]; then
    if [ -x "$REPO/.venv/bin/coupprof" ]; then COUPPROF=$REPO/.venv/bin/coupprof; else COUPPROF=coupprof; fi
fi
if [ -z "${PY:-}" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python; else PY=python3; fi
fi
export COLUMNS=${COLUMNS:-160}  # the tables in the logs, unwrapped
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# Run a command, logging it to $LOG_DIR/commands.sh and its output to $LOG_DIR/log.txt.
LOG_DIR=$OUT
run() {
    printf '%q ' "$@" >> "$LOG_DIR/commands.sh"; echo >> "$LOG_DIR/commands.sh"
    echo "+ $*" | tee -a "$LOG_DIR/log.txt"
    "$@" 2>&1 | tee -a "$LOG_DIR/log.txt"
}

# The model: a path as given, the bundled default, or a zoo model built into the cache.
if [ -f "$MODEL" ]; then
    MODEL_PATH=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
    NAME=$(basename "$MODEL" .tflite)
elif [ "$MODEL" = default ]; then
    MODEL_PATH=$($PY -c 'from profiler.zoo import default_model_path; print(default_model_path())')
    NAME=$(basename "$MODEL_PATH" .tflite)
else
    # `coupprof zoo NAME` prints "wrote PATH: ..." (the cache's copy, built once)
    MODEL_PATH=$($COUPPROF zoo "$MODEL" | sed -n 's/^wrote \(.*\.tflite\): .*/\1/p')
    NAME=$MODEL
    [ -f "$MODEL_PATH" ] || { echo "run.sh: could not build zoo model $MODEL" >&2; exit 2; }
fi
echo "model $NAME: $MODEL_PATH"
if [ "$TABLE_METHOD" = auto ]; then
    if [ "$(stat -c %s "$MODEL_PATH")" -gt 100000000 ]; then TABLE_METHOD=sliced; else TABLE_METHOD=fused; fi
fi

# Layer tables for explore: measured once on one core of this host, on the devices' board
# (sim), and given to every device (all the same board here).
if [ -z "$TABLES" ]; then
    TABLES=$OUT/$NAME-tables
    mkdir -p "$TABLES"
    LOG_DIR=$TABLES
    PIN=(); if command -v taskset > /dev/null; then PIN=(taskset -c 0); fi
    for p in ${PROCESSORS//,/ }; do
        [ -f "$TABLES/$p.csv" ] && continue  # already measured (rerun: delete to redo)
        run "${PIN[@]}" $COUPPROF layers --board sim -p "$p" --power sim --model "$MODEL_PATH" \
            --frames "$TABLE_FRAMES" --warmup 1 --method "$TABLE_METHOD" --csv "$TABLES/$p.csv"
    done
fi

for N in $NS; do
    if [ "$N" -le 2 ]; then DEVICES=$DEVICES2; else DEVICES=$DEVICES4; fi
    DIR=$OUT/$NAME-${N}dev
    rm -rf "$DIR"; mkdir -p "$DIR"
    LOG_DIR=$DIR
    ORDER_VAR=ORDER$N
    ORDER=${!ORDER_VAR:-}
    if [ -z "$ORDER" ]; then
        # every device of the file gets the same tables: --layers d0=T --layers d1=T ...
        LAYERS=()
        for d in $($PY -c 'import sys; from profiler.devices.spec import read_devices
print(" ".join(read_devices(sys.argv[1]).names))' "$DEVICES"); do
            LAYERS+=(--layers "$d=$TABLES")
        done
        EXTRA=(); if [ -n "$LINKS" ]; then EXTRA=(--links "$LINKS"); fi
        run $COUPPROF explore --devices "$DEVICES" "${LAYERS[@]}" "${EXTRA[@]}" \
            --processors "$PROCESSORS" --mode "$MODE" --model "$MODEL_PATH" --csv "$DIR/explore.csv"
        # the fastest candidate that uses exactly N devices (explore's front and its
        # single-device rows; a front may hold none with N devices: then pass ORDER<N>)
        ORDER=$($PY -c 'import sys, pandas as pd
df = pd.read_csv(sys.argv[1]); n = int(sys.argv[2])
df = df[df["order"].str.split().str.len() == n].sort_values("throughput_fps", ascending=False, kind="stable")
print(df["order"].iloc[0] if len(df) else "")' "$DIR/explore.csv" "$N")
        if [ -z "$ORDER" ]; then
            echo "run.sh: explore's candidates in $DIR/explore.csv hold no split over $N devices;" \
                 "pass ORDER$N='d0:... d1:...'" >&2
            exit 2
        fi
        echo "N=$N: explore's fastest split over $N devices: $ORDER" | tee -a "$DIR/log.txt"
    fi
    F=(); if [ -n "$FREQ" ]; then F=(--freq "$FREQ"); fi
    run $COUPPROF run --devices "$DEVICES" --order "$ORDER" --mode "$MODE" --model "$MODEL_PATH" \
        --frames "$FRAMES" --warmup "$WARMUP" "${F[@]}" --csv "$DIR/run.csv"
done

echo "done: notebooks/06_several_boards.ipynb with RUNS = the $NAME-<N>dev folders in $OUT"
