"""Board and processor descriptions (what a profile TOML or the host's /sys turns into).

Processor letters follow ARM-CO-UP: L little CPU cluster, B big CPU cluster,
G GPU, N NPU. Frequencies are kHz everywhere, voltages mV.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from profiler.errors import BoardError, RuntimeUnavailableError

PROCESSOR_LETTERS = ("L", "B", "G", "N")


class ProcessorKind(str, Enum):
    """What a processor is (a profile's ``kind``) and what that lets it do. A str enum:
    it equals and prints as the profile's string, so sidecars read "cpu", "gpu", "npu".

    Whether it has DVFS levels of its own is the profile's (`ProcessorSpec.has_dvfs`: a
    GPU may have none, the host board's G), and whether a call holds Python's GIL is the
    runtime's (`Executor.holds_gil`: LiteRT's CompiledModel does, on its CPU accelerator
    too; the sim's G runs the interpreter and does not)."""

    CPU = "cpu"
    GPU = "gpu"
    NPU = "npu"

    # The value wherever it is printed or formatted, as the plain string was.
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def is_cpu(self) -> bool:
        """A CPU cluster: it runs the interpreter (and a busy loop) on its own cores."""
        return self is ProcessorKind.CPU

    @property
    def is_accelerator(self) -> bool:
        """A device the host hands calls to (G, N): each call pays a fixed cost to launch."""
        return self is not ProcessorKind.CPU

    @property
    def needs_host(self) -> bool:
        """Driven from a CPU cluster of the board (its profile's ``host``), whose cores it
        borrows and whose levels an NPU without DVFS of its own uses."""
        return self.is_accelerator

    @property
    def downloads_results(self) -> bool:
        """Hands its outputs back by a download (the simulated G too, which models one), so
        fused prefixes reduce and read them, and a call that reads more costs more."""
        return self.is_accelerator


@dataclass(frozen=True)
class GovernorSpec:
    """How to set a processor's frequency.

    kind: "cpufreq" | "devfreq" | "kgsl" | "mpgpu" | "sim" | "sim-driver" | "none"
          ("sim-driver": a simulated clock its driver picks from the load; read only)
    path: sysfs directory relative to the sysfs root, e.g.
          "devices/system/cpu/cpufreq/policy4" or "class/devfreq/ff9a0000.gpu".
    """

    kind: str
    path: str = ""


@dataclass(frozen=True)
class ProcessorSpec:
    letter: str  # "L", "B", "G" or "N"
    kind: ProcessorKind  # a profile's "cpu", "gpu" or "npu" string is taken too
    name: str  # human name, e.g. "Cortex-A72 x2"
    cores: tuple[int, ...]  # CPU cores it runs on; for G/N the host cluster's cores
    freqs_khz: tuple[int, ...] = ()  # DVFS table, ascending; empty = no DVFS
    volts_mv: tuple[int | None, ...] = ()  # same length as freqs_khz where known
    governor: GovernorSpec | None = None
    host: str | None = None  # for G/N: letter of the CPU cluster that drives it
    accelerator: str | None = None  # "gpu" / "npu" (LiteRT CompiledModel) or None for CPU
    delegate: str | None = None  # delegate library path (tflite-runtime boards)
    extra: dict[str, Any] = field(default_factory=dict)  # power-model constants etc.

    def __post_init__(self) -> None:
        if not isinstance(self.kind, ProcessorKind):
            object.__setattr__(self, "kind", ProcessorKind(self.kind))

    @property
    def has_dvfs(self) -> bool:
        return bool(self.freqs_khz)

    def levels_text(self) -> str:
        """'1=408 MHz, 2=600 MHz, ...' for error messages."""
        return ", ".join(f"{i}={f / 1000:g} MHz" for i, f in enumerate(self.freqs_khz, 1))


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    processors: dict[str, ProcessorSpec]
    simulated: bool = False
    source: Path | None = None  # profile file it came from, None for generated ones
    extra: dict[str, Any] = field(default_factory=dict)
    # Processors the machine has but the installed runtime cannot drive: letter -> why and
    # what to install (`host`'s G under tflite-runtime; `executors.with_accelerators`).
    unavailable: dict[str, str] = field(default_factory=dict)

    def processor(self, letter: str) -> ProcessorSpec:
        key = letter.upper()
        if key not in self.processors:
            have = ", ".join(self.processors) or "none"
            if key in self.unavailable:  # exit 3, as for any missing accelerator
                raise RuntimeUnavailableError(
                    f"board '{self.name}' has no processor '{key}' here: "
                    f"{self.unavailable[key]}",
                    f"or pick another with --processor (it has: {have})")
            raise BoardError(
                f"board '{self.name}' has no processor '{letter}' (it has: {have})",
                "pick one with --processor, or another board with --board",
            )
        return self.processors[key]

    def dvfs_domain(self, letter: str) -> ProcessorSpec:
        """The processor whose frequency table and governor a DVFS level of ``letter``
        uses: its own, or for one without DVFS (the NPU) its host CPU cluster's, as
        ARM-CO-UP does (its Fig. 16d)."""
        proc = self.processor(letter)
        if not proc.has_dvfs and proc.host:
            return self.processor(proc.host)
        return proc


def resolve_level(proc: ProcessorSpec, spec: str | int | None, board: str = "") -> tuple[int, int] | None:
    """Turn a --freq value ("4", "min", "max") into (1-based level, freq_khz).

    None means "leave the frequency alone". For N (no DVFS of its own) callers pass
    the host cluster's spec, as ARM-CO-UP does.
    """
    if spec is None:
        return None
    if not proc.freqs_khz:
        raise BoardError(
            f"processor {proc.letter} on board '{board}' has no DVFS levels"
            " (no governor in the profile)",
            "drop --freq, or use a board profile with a frequency table (`coupprof boards`)",
        )
    n = len(proc.freqs_khz)
    text = str(spec).strip().lower()
    if text == "min":
        idx = 1
    elif text == "max":
        idx = n
    else:
        try:
            idx = int(text)
        except ValueError:
            raise BoardError(f"--freq '{spec}' is not a level number, 'min' or 'max'",
                             f"valid levels for {proc.letter}: {proc.levels_text()}") from None
    if not 1 <= idx <= n:
        raise BoardError(
            f"--freq {idx} is out of range for processor {proc.letter} on board '{board}'",
            f"valid levels: {proc.levels_text()}",
        )
    return idx, proc.freqs_khz[idx - 1]
