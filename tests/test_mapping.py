"""Order strings, stages, boundary tensors and frequency SPECs (profiler/mapping/spec.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.errors import BadInputError, BoardError
from profiler.mapping.spec import (
    Mapping,
    boundary_tensors,
    parse_freq,
    parse_order,
    pipeline_conflicts,
)
from profiler.slicing.slicer import slice_model

SIM = load_board("sim")
L_KHZ = SIM.processor("L").freqs_khz
B_KHZ = SIM.processor("B").freqs_khz
G_KHZ = SIM.processor("G").freqs_khz


@pytest.mark.parametrize("text", ["GGBBBBNN", "G2B4N2", "gg-bbbb-nn", "G2 B4, N2", "GGB3BN_N"])
def test_order_forms_expand_to_the_same_mapping(text: str) -> None:
    assert parse_order(text, 8, SIM).order == "GGBBBBNN"


def test_stages_changes_and_compact_form() -> None:
    m = Mapping("GGBBBBNNG")
    assert [(s.processor, s.layers) for s in m.stages] == [
        ("G", (0, 1)), ("B", (2, 3, 4, 5)), ("N", (6, 7)), ("G", (8,))]
    assert m.changes == [1, 5, 7]
    assert m.compact == "G2B4N2G1"
    assert m.processors == ["G", "B", "N"]
    assert [m.stage_of(i) for i in range(9)] == [0, 0, 1, 1, 1, 1, 2, 2, 3]


def test_order_length_must_equal_the_layer_count() -> None:
    with pytest.raises(BadInputError) as err:
        parse_order("GGBB", 8, SIM)
    assert "4 layers" in str(err.value) and "8 layers" in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("text, needle", [("GGXB", "'X' is not a processor letter"),
                                          ("", "empty"), ("G0B8", "count 0"),
                                          ("4GB", "not a string of processor letters")])
def test_bad_orders_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(BadInputError, match=needle):
        parse_order(text, 8, SIM)


def test_order_letters_must_exist_on_the_board() -> None:
    host_like = load_board("rpi5")
    with pytest.raises(BoardError, match="does not have"):
        parse_order("GGBB", 4, host_like)


def _live_by_consumers(sliced, b: int) -> set[int]:
    """Independent definition: what layers after b read minus what they make."""
    later = sliced.layers[b + 1:]
    read = {int(t.index) for layer in later for t in layer.inputs}
    made = {int(t.index) for layer in later for t in layer.outputs}
    return read - made


@pytest.mark.parametrize("name, params", [("resnet50", dict(size=32, classes=10)),
                                          ("googlenet", dict(size=32, classes=10))])
def test_boundary_tensors_are_what_later_layers_read(name: str, params: dict,
                                                     tmp_path: Path) -> None:
    sliced = slice_model(zoo.build(name, **params), "op", cache_dir=tmp_path)
    bounds = boundary_tensors(sliced)
    assert len(bounds) == len(sliced.layers) - 1
    for b, specs in enumerate(bounds):
        assert {int(t.index) for t in specs} == _live_by_consumers(sliced, b)
    # Cutting residual blocks / inception branches per op makes some boundaries carry >1.
    assert max(len(s) for s in bounds) >= 2


def test_plain_chain_hands_over_exactly_the_previous_outputs(tmp_path: Path) -> None:
    sliced = slice_model(zoo.default_model_path(), cache_dir=tmp_path)
    for b, specs in enumerate(boundary_tensors(sliced)):
        assert [t.index for t in specs] == [t.index for t in sliced.layers[b].outputs]
        assert sum(t.nbytes for t in specs) == sliced.layers[b].output_bytes


# ---- frequency SPECs ------------------------------------------------------------

M = Mapping("GGBBBBNN")


def test_no_spec_leaves_everything_alone() -> None:
    plan = parse_freq(None, M, SIM)
    assert plan.mode == "none" and plan.level == (None,) * 8


def test_one_level_for_every_processor_is_set_once() -> None:
    plan = parse_freq("4", M, SIM)
    assert plan.mode == "per-processor"
    # N has no DVFS of its own: its level goes to its host cluster B.
    assert plan.setup == {"G": (4, G_KHZ[3]), "B": (4, B_KHZ[3])}
    assert plan.domain == ("G", "G", "B", "B", "B", "B", "B", "B")
    assert plan.khz == (G_KHZ[3],) * 2 + (B_KHZ[3],) * 6


def test_per_processor_levels_and_min_max() -> None:
    plan = parse_freq("G=max,B:2", M, SIM)
    assert plan.setup == {"G": (5, G_KHZ[-1]), "B": (2, B_KHZ[1])}
    assert parse_freq("g=min", M, SIM).setup == {"G": (1, G_KHZ[0])}


def test_n_and_its_host_cannot_ask_for_different_levels() -> None:
    with pytest.raises(BadInputError, match="both set the frequency of B"):
        parse_freq("B=5,N=3", M, SIM)
    assert parse_freq("B=5,N=5", M, SIM).setup == {"B": (5, B_KHZ[4])}


def test_per_stage_levels_expand_over_each_stage() -> None:
    plan = parse_freq("4/8/3", M, SIM)
    assert plan.mode == "per-layer"
    assert plan.level == (4, 4, 8, 8, 8, 8, 3, 3)
    assert plan.khz == (G_KHZ[3], G_KHZ[3]) + (B_KHZ[7],) * 4 + (B_KHZ[2],) * 2


def test_per_layer_levels_with_gaps() -> None:
    plan = parse_freq("4,4,6,6,-,6,3,", M, SIM)
    assert plan.level == (4, 4, 6, 6, None, 6, 3, None)
    assert plan.khz[4] is None and plan.khz[0] == G_KHZ[3] and plan.khz[6] == B_KHZ[2]


@pytest.mark.parametrize("spec, needle", [
    ("4,4,6", "3 per-layer levels but the model has 8 layers"),
    ("4/8", "2 per-stage levels but the mapping G2B4N2 has 3 stages"),
    ("G=four", "not a level number"),
    ("Q=3", "has no processor 'Q'"),
    ("G4,B=3", "not LETTER=LEVEL"),
])
def test_bad_freq_specs_say_what_is_wrong(spec: str, needle: str) -> None:
    with pytest.raises((BadInputError, BoardError), match=needle):
        parse_freq(spec, M, SIM)


def test_out_of_range_levels_list_the_valid_ones() -> None:
    with pytest.raises(BoardError) as err:
        parse_freq("G=6", M, SIM)  # the simulated Mali has 5 levels
    assert "out of range" in str(err.value) and "5=800 MHz" in str(err.value)


def test_pipeline_stages_sharing_a_domain_must_agree() -> None:
    m = Mapping("BBNNLL")  # B and N share B's cpufreq policy and run at once in a pipeline
    assert pipeline_conflicts(parse_freq("8/8/3", m, SIM), m) is None
    clash = pipeline_conflicts(parse_freq("8/6/3", m, SIM), m)
    assert clash is not None and "stages 0 and 1" in clash and "B" in clash
    assert pipeline_conflicts(parse_freq("4", m, SIM), m) is None
    assert L_KHZ  # the little cluster has its own table


def test_calls_fused_is_a_stage_each_cut_where_a_per_layer_level_changes() -> None:
    from profiler.mapping.spec import Mapping, calls

    sim = load_board("sim")
    m = Mapping("BBBBGGGG")
    assert [c.layers for c in calls(m)] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [c.layers for c in calls(m, method="sliced")] == [(i,) for i in range(8)]
    assert [(c.index, c.stage, c.processor) for c in calls(m)] == [(0, 0, "B"), (1, 1, "G")]
    # Per layer: B 8 8 | 3, G - 2 2 | 4: a '-' joins the call around it; a change cuts.
    plan = parse_freq("8,8,8,3,-,2,2,4", m, sim)
    assert [c.layers for c in calls(m, plan)] == [(0, 1, 2), (3,), (4, 5, 6), (7,)]
    # Per stage and per processor SPECs never cut a stage.
    for spec in ("8/4", "B=8,G=4", "4"):
        assert len(calls(m, parse_freq(spec, m, sim))) == 2
    with pytest.raises(BadInputError, match="--method"):
        calls(m, method="whole")
