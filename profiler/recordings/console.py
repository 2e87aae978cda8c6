"""ARM-CO-UP's console log (``time_<model>_<order>.txt``): layer times per setting.

Each setting starts with ``K Running Graph with a-b-...-n LW DVFS``. Within it every
graph prints ``Layer Number: k   time: X`` (ms, averaged over the setting's frames) for
each of its layers, then ``GraphG   Input: ...   Task: ...``. A run with one graph
prints all layers under it; a mapping like NBNB... runs one graph per layer, each
printing ``Layer Number: 0``. So the setting's layer times are the ``Layer Number``
lines in order. NPU graphs add ``AVG_input_time`` / ``AVG_run_time`` /
``AVG_prof_run_time`` / ``AVG_output_time`` (ms); ARM-CO-UP's Layers.csv takes the
NPU layer's Time from ``AVG_prof_run_time``, while its marker window spans the whole
node (``Layer Number`` time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from profiler.errors import BadInputError

_SETTING = re.compile(r"^\s*(\d+)\s+Running Graph with\s+(\S+)")
_LAYER = re.compile(r"Layer Number:\s*(\d+)\s+time:\s*([-+0-9.eE]+)")
_GRAPH = re.compile(r"^Graph(\d+)\s+Input:\s*([-+0-9.eE]+)")
_NPU = re.compile(r"AVG_input_time:([-+0-9.eE]+)\s+AVG_run_time:([-+0-9.eE]+)\s+"
                  r"AVG_prof_run_time:([-+0-9.eE]+)\s+AVG_output_time:([-+0-9.eE]+)")


@dataclass
class ConsoleSetting:
    """One frequency setting of the console log."""

    label: str  # the DVFS string, e.g. 0-0-0-...-0
    layer_ms: list[float] = field(default_factory=list)  # per layer, in order
    input_ms: float | None = None  # Graph0's Input (the frame's input window)
    npu_ms: dict[int, dict[str, float]] = field(default_factory=dict)  # layer -> metric -> ms


@dataclass
class ConsoleLog:
    path: Path
    settings: list[ConsoleSetting]

    def layer_ms(self, setting: int, layer: int) -> float | None:
        if setting >= len(self.settings):
            return None
        times = self.settings[setting].layer_ms
        return times[layer] if layer < len(times) else None


def read_console_log(path: str | Path) -> ConsoleLog:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise BadInputError(f"console log not found: {p}",
                            "pass the run's time_*.txt with --console, or leave it out") from None
    except OSError as err:
        raise BadInputError(f"cannot read console log {p}: {err.strerror}") from None
    settings: list[ConsoleSetting] = []
    for line in text.splitlines():
        m = _SETTING.match(line)
        if m:
            settings.append(ConsoleSetting(label=m.group(2)))
            continue
        if not settings:
            continue
        cur = settings[-1]
        m = _LAYER.search(line)
        if m:
            cur.layer_ms.append(float(m.group(2)))
            continue
        m = _GRAPH.match(line)
        if m and int(m.group(1)) == 0:
            cur.input_ms = float(m.group(2))
            continue
        m = _NPU.search(line)
        if m and cur.layer_ms:
            names = ("npu_input_ms", "npu_run_ms", "npu_prof_run_ms", "npu_output_ms")
            cur.npu_ms[len(cur.layer_ms) - 1] = {k: float(v) for k, v in
                                                 zip(names, m.groups(), strict=True)}
    if not settings:
        raise BadInputError(f"{p} has no 'Running Graph with' lines: not an ARM-CO-UP "
                            "console log", "pass the run's time_*.txt, or leave --console out")
    return ConsoleLog(path=p, settings=settings)
