"""ProcessorKind says what a kind of processor can do; Method is --method. Both are str
enums: they parse the profile's and the command line's strings and write them back
unchanged into CSVs and JSON sidecars."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest

from profiler.boards.model import ProcessorKind, ProcessorSpec
from profiler.boards.profiles import BOARDS_DIR, load_profile
from profiler.measure.fused import FusedSettings, settings_for
from profiler.measure.method import METHODS, Method

CPU, GPU, NPU = ProcessorKind.CPU, ProcessorKind.GPU, ProcessorKind.NPU

# kind -> (is_cpu, is_accelerator, needs_host, downloads_results)
CAPABILITIES = {
    CPU: (True, False, False, False),
    GPU: (False, True, True, True),
    NPU: (False, True, True, True),
}


@pytest.mark.parametrize("kind", list(ProcessorKind))
def test_each_kind_says_what_it_can_do(kind: ProcessorKind) -> None:
    assert (kind.is_cpu, kind.is_accelerator, kind.needs_host,
            kind.downloads_results) == CAPABILITIES[kind]


def test_kinds_are_the_profile_strings() -> None:
    assert [k.value for k in ProcessorKind] == ["cpu", "gpu", "npu"]
    for text in ("cpu", "gpu", "npu"):
        kind = ProcessorKind(text)
        assert kind == text and str(kind) == text and f"{kind}" == text
        assert f"({kind:>4})" == f"({text:>4})"
    with pytest.raises(ValueError):
        ProcessorKind("dsp")


def test_a_spec_made_from_a_string_holds_the_kind() -> None:
    spec = ProcessorSpec("N", "npu", "vendor NPU", (0,), host="B")
    assert spec.kind is NPU and spec.kind.needs_host
    with pytest.raises(ValueError):
        ProcessorSpec("X", "tpu", "no such kind", (0,))


def test_bundled_profiles_read_as_kinds() -> None:
    seen = set()
    for path in BOARDS_DIR.glob("*.toml"):
        board = load_profile(path)
        for p in board.processors.values():
            assert isinstance(p.kind, ProcessorKind)
            seen.add(p.kind)
            # a kind that needs a host has one, and it is a CPU cluster
            assert (p.host is not None) == p.kind.needs_host
            if p.host is not None:
                assert board.processor(p.host).kind.is_cpu
    assert seen == set(ProcessorKind)


def test_fused_windows_only_where_outputs_stay_in_host_memory() -> None:
    windowed = FusedSettings(window=6)
    assert settings_for(windowed, CPU).window == 6
    assert settings_for(windowed, GPU).window == 0
    assert settings_for(windowed, NPU).window == 0


def test_method_parses_and_prints_the_command_line_strings() -> None:
    assert METHODS == ("fused", "sliced")
    for text in METHODS:
        m = Method(text)
        assert m == text and str(m) == text and f"{m}" == text and m.value == text
    assert Method("fused") is Method.FUSED and Method("sliced") is Method.SLICED
    with pytest.raises(ValueError):
        Method("exact")


def test_method_writes_plain_strings_into_json_and_csv() -> None:
    assert json.dumps({"method": Method.FUSED, "kind": GPU}) == '{"method": "fused", "kind": "gpu"}'
    out = io.StringIO()
    csv.writer(out).writerow([Method.SLICED, CPU])
    assert out.getvalue().strip() == "sliced,cpu"
    df = pd.DataFrame({"method": [Method.FUSED, Method.SLICED]})
    assert df.to_csv(index=False) == "method\nfused\nsliced\n"


def test_default_method_per_kind_and_asked_method_wins() -> None:
    assert Method.default_for(CPU) is Method.SLICED
    assert Method.default_for(GPU) is Method.FUSED
    assert Method.default_for(NPU) is Method.FUSED
    assert Method.chosen(None, GPU) is Method.FUSED
    assert Method.chosen(None, CPU) is Method.SLICED
    assert Method.chosen("sliced", GPU) is Method.SLICED
    assert Method.chosen("fused", CPU) is Method.FUSED
