#!/bin/bash
# Sourced by the call scripts here, on the lent GPU machine, from the repository root:
# the Vulkan loader (.gl/), Mesa's device-select layer and its libraries (.gl2/) into
# /tmp/vk, the carried wheels (.whl/) into /tmp/site, MPICH unpacked from its wheel (pip's
# --target drops a wheel's data/lib), and C, the coupprof command.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /tmp/vk/lib /tmp/vk/x; for f in .gl2/*.deb; do dpkg -x $f /tmp/vk/x; done
cp -a /tmp/vk/x/usr/lib/x86_64-linux-gnu/* /tmp/vk/x/lib/x86_64-linux-gnu/* /tmp/vk/lib/ 2>/dev/null; cp -a .gl2/layer /tmp/vk/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m zipfile -e .whl/mpich-5.0.2-py3-none-manylinux_2_28_x86_64.whl /tmp/mpich; M=/tmp/mpich/mpich-5.0.2.data/data; chmod +x $M/bin/*
export PYTHONPATH=/tmp/site:$PWD PATH=$M/bin:$PATH MPI4PY_LIBMPI=$M/lib/libmpi.so.12
C="python3 -m profiler"
