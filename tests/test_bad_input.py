"""Bad input to `coupprof layers`: one line naming the problem and the fix, exit 2,
no traceback. Run as a user would, through the console script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import load_model, serialize_model
from profiler.zoo import default_model_path

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
DEFAULT_MODEL = default_model_path()
BIG_KHZ = (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000)


def layers(*args: str, cwd: Path) -> tuple[int, str]:
    r = subprocess.run([COUPPROF, "layers", "--frames", "1", "--warmup", "0", *args], cwd=cwd,
                       env={**os.environ, "COUPPROF_CACHE": str(cwd / "cache")},
                       capture_output=True, text=True, timeout=120)
    # LiteRT logs "INFO: Created TensorFlow Lite XNNPACK delegate" itself, and "coupprof:"
    # notices say which board was picked; the error is the rest.
    err = "\n".join(line for line in r.stderr.splitlines()
                    if not line.startswith(("INFO:", "coupprof: ")))
    return r.returncode, err


def assert_one_line(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("coupprof layers: error: ")
    for n in needles:
        assert n in err, (n, err)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    data = DEFAULT_MODEL.read_bytes()
    (d / "not_a_model.tflite").write_bytes(b"PK\x03\x04 this is a zip file, not a flatbuffer" * 10)
    (d / "truncated.tflite").write_bytes(data[: len(data) // 2])
    (d / "truncated_tail.tflite").write_bytes(data[:-16])
    # A model whose last operator is a custom op LiteRT has no kernel for.
    model, _ = load_model(DEFAULT_MODEL)
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = "CoupprofNoSuchOp"
    model.operatorCodes.append(code)
    last = model.subgraphs[0].operators[-1]
    last.opcodeIndex = len(model.operatorCodes) - 1
    last.builtinOptionsType, last.builtinOptions = 0, None
    (d / "custom_op.tflite").write_bytes(serialize_model(model))
    # A big.LITTLE sysfs tree (RK3399-like) so --freq has levels to be out of range of.
    cpu = d / "sys/devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-5\n")
    for first, cores, freqs in ((0, "0 1 2 3", BIG_KHZ[:6]), (4, "4 5", BIG_KHZ)):
        pol = cpu / f"cpufreq/policy{first}"
        pol.mkdir(parents=True)
        (pol / "related_cpus").write_text(cores + "\n")
        (pol / "cpuinfo_max_freq").write_text(f"{max(freqs)}\n")
        (pol / "scaling_available_frequencies").write_text(" ".join(map(str, freqs)) + "\n")
    return d


CASES = {
    "missing file": (["--model", "no/such/model.tflite"], ["not found", "no/such/model.tflite", "--model"]),
    "not tflite": (["--model", "{d}/not_a_model.tflite"], ["not a .tflite model", "not_a_model.tflite"]),
    "truncated": (["--model", "{d}/truncated.tflite"], ["truncated", "truncated.tflite"]),
    "truncated tail": (["--model", "{d}/truncated_tail.tflite"], ["truncated_tail.tflite"]),
    "custom op": (["--model", "{d}/custom_op.tflite"], ["cannot run", "custom_op.tflite",
                                                         "CoupprofNoSuchOp"]),
    "directory": (["--model", "{d}"], ["is a directory"]),
    "unknown processor": (["--board", "host", "--processor", "X"],
                          ["no processor 'X'", "it has: B", "--processor"]),
    "unknown processor on sim": (["--processor", "X"], ["no processor 'X'", "it has: L, B, G, N"]),
    "freq out of range": (["--board", "host", "--sysfs-root", "{d}/sys", "--processor", "B",
                           "--freq", "9"],
                          ["--freq 9 is out of range", "valid levels: 1=408 MHz", "8=1800 MHz"]),
    "freq out of range on rk3399pro": (["--board", "rk3399pro", "--processor", "B", "--freq", "9"],
                                       ["--freq 9 is out of range", "1=408 MHz", "8=1800 MHz"]),
    "freq out of range on sim G": (["--processor", "G", "--freq", "6"],
                                   ["--freq 6 is out of range", "5=800 MHz"]),
    "freq not a level": (["--board", "host", "--sysfs-root", "{d}/sys", "--processor", "L",
                          "--freq", "fast"],
                         ["'fast' is not a level number", "6=1416 MHz"]),
    "cuts not numbers": (["--cuts", "3,x"], ["--cuts", "3,x"]),
    "cut out of range": (["--cuts", "5,999"], ["999", "out of range"]),
    "cuts with op granularity": (["--granularity", "op", "--cuts", "3"], ["exclude each other"]),
    "negative frames": (["--frames", "-3"], ["--frames", "-3 must be 1 or more"]),
    "zero threads": (["--threads", "0"], ["--threads", "must be 1 or more"]),
    "negative warmup": (["--warmup", "-1"], ["--warmup"]),
    "bad granularity": (["--granularity", "block"], ["--granularity", "block"]),
    "unknown board": (["--board", "nosuchboard"], ["unknown board 'nosuchboard'", "host"]),
    "sim power off the sim board": (["--board", "host", "--power", "sim"],
                                    ["--power sim needs the simulated board", "--board sim"]),
    "logger without a marker": (["--board", "host", "--power", "arduino:/dev/ttyNOPE"],
                                ["no --marker was given", "gpiod:CHIP:LINE"]),
    "unknown power source": (["--power", "bogus"], ["unknown power source 'bogus'", "arduino"]),
    "bad marker": (["--power", "sim", "--marker", "wires:3"], ["unknown marker 'wires:3'"]),
    "negative baseline": (["--baseline-s", "-1"], ["--baseline-s", "negative"]),
    "bad sysfs root": (["--board", "host", "--sysfs-root", "{d}/nowhere"],
                       ["no CPU topology", "--sysfs-root"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2(case: str, files: Path) -> None:
    args, needles = CASES[case]
    rc, err = layers(*(a.format(d=files) for a in args), cwd=files)
    assert_one_line(rc, err, *needles)
