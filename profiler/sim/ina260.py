"""A simulated INA260-on-an-Arduino logger like ARM-CO-UP's, with known truth.

The board's true power is piecewise constant (one level per marked window). The sensor
averages it over each conversion and updates its register every ``update_ms`` (the
INA260's conversion averaging; ~2.7 ms in ARM-CO-UP's data), in 10 mW steps. The Arduino
prints ``pin,millis,mW`` lines 1, 2 or 3 ms apart (56 / 42 / 2 %), reading the pin and
the register at the same instant; millis is the integer part of its clock. So the
readings lag the pin by about one update period, as in their recordings.

`simulate_run` lays out a run as ARM-CO-UP's (settings x (warm-up + frames) x layers,
an input gap and an ~8 ms sleep gap per layer, a blip and a long idle per setting), with
frame 0 of each setting still at the previous setting's speed and power for its first
layer, and returns the log's text and the true per-layer power and time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.recordings.layout import RunLayout

POWER_STEP_MW = 10.0
UPDATE_MS = 2.7
NOISE_MW = 15.0  # sensor and supply noise per conversion
GAPS_MS = (1.0, 2.0, 3.0)
GAP_P = (0.56, 0.42, 0.02)


@dataclass
class TruePiece:
    t0_ms: float
    t1_ms: float
    power_mw: float
    active: bool


@dataclass
class SimulatedRun:
    text: str  # the pin,millis,mW log
    layout: RunLayout
    truth_power_mw: np.ndarray  # (settings, layers), over the measured frames, time-weighted
    truth_time_ms: np.ndarray  # (settings, layers), mean window over the measured frames
    console_ms: np.ndarray  # (settings, layers), mean over all frames (as their console prints)


def sample(pieces: list[TruePiece], rng: np.random.Generator, update_ms: float = UPDATE_MS
           ) -> str:
    """The logger's lines for a true power signal."""
    t0 = np.array([p.t0_ms for p in pieces])
    t1 = np.array([p.t1_ms for p in pieces])
    pw = np.array([p.power_mw for p in pieces])
    act = np.array([p.active for p in pieces])
    cum = np.r_[0.0, np.cumsum((t1 - t0) * pw)]
    end = float(t1[-1])

    def energy_to(t: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(t0, t, side="right") - 1, 0, len(pieces) - 1)
        return cum[i] + (np.minimum(t, t1[i]) - t0[i]) * pw[i]

    n = int(end / 1.45) + 10
    steps = rng.choice(GAPS_MS, size=n, p=GAP_P) + rng.uniform(-0.02, 0.02, n)
    times = float(t0[0]) + update_ms + np.cumsum(steps)
    times = times[times < end]
    phase = rng.uniform(0, update_ms)
    # Register content at time t: the mean power over the last completed conversion.
    done = np.floor((times - phase) / update_ms) * update_ms + phase
    value = (energy_to(done) - energy_to(done - update_ms)) / update_ms
    # each conversion's own noise: the same update read twice gives the same value
    update_no = np.round((done - phase) / update_ms).astype(np.int64)
    noise = np.random.default_rng(int(rng.integers(1 << 31))).normal(
        0.0, NOISE_MW, int(update_no.max()) + 2)
    value = value + noise[update_no - update_no.min()]
    value = np.round(value / POWER_STEP_MW) * POWER_STEP_MW
    idx = np.clip(np.searchsorted(t0, times, side="right") - 1, 0, len(pieces) - 1)
    pin = np.where(act[idx], 0, 1)
    millis = np.floor(times).astype(np.int64)
    return "".join(f"{p},{m},{v:.2f}\n" for p, m, v in zip(pin, millis, value, strict=True))


def simulate_run(layout: RunLayout, layer_ms: np.ndarray, layer_mw: np.ndarray, seed: int = 0,
                 gap_mw: float = 3000.0, input_ms: float = 40.0, sleep_ms: float = 8.0,
                 idle_ms: float = 400.0, jitter: float = 0.05) -> SimulatedRun:
    """``layer_ms`` / ``layer_mw``: (settings, layers) nominal time and power of each layer."""
    rng = np.random.default_rng(seed)
    n_set, n_lay = layer_ms.shape
    pieces: list[TruePiece] = []
    t = 0.0
    energy = np.zeros((n_set, n_lay))
    time = np.zeros((n_set, n_lay))
    console = np.zeros((n_set, n_lay))

    def add(dur: float, power: float, active: bool) -> None:
        nonlocal t
        pieces.append(TruePiece(t, t + dur, power, active))
        t += dur

    add(30.0, gap_mw, False)  # idle before the run, at the idle level (pin 1)
    for s in range(n_set):
        for f in range(layout.runs):
            # the sleep after the previous layer, then reading the input: one idle-level gap
            add(sleep_ms + input_ms * rng.uniform(0.97, 1.03), gap_mw + 100.0, False)
            for k in range(n_lay):
                if k > 0:
                    add(sleep_ms * rng.uniform(0.9, 1.15), gap_mw, False)
                prev = s - 1 if s > 0 else s
                slow = f == 0 and k == 0 and s > 0  # the new frequency not applied yet
                ms = (layer_ms[prev, k] if slow else layer_ms[s, k]) * rng.uniform(1 - jitter, 1 + jitter)
                mw = (layer_mw[prev, k] if slow else layer_mw[s, k]) * rng.uniform(0.98, 1.02)
                add(ms, mw, True)
                console[s, k] += ms / layout.runs
                if f >= layout.warmup:
                    energy[s, k] += ms * mw
                    time[s, k] += ms
        add(17.0, gap_mw, False)  # the last sleep and the blip (pin 1)
        add(idle_ms * rng.uniform(0.98, 1.02), gap_mw - 200.0, True)  # waiting: pin 0
    text = sample(pieces, rng)
    return SimulatedRun(text=text, layout=layout, truth_power_mw=energy / time,
                        truth_time_ms=time / layout.frames, console_ms=console)
