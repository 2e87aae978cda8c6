"""ARM-CO-UP's INA260-on-an-Arduino logger, simulated, with known truth.

The sensor (`Ina260Model`) averages the power over each conversion and updates its
register every ``update_ms``; the sketch prints ``pin,millis,mW`` lines milliseconds
apart, so the readings lag the pin by about one update period, as in their recordings.
`VirtualIna260` is that logger on a pseudo-terminal for the simulated board (``--power
sim:ina260``); `simulate_run` writes a whole ARM-CO-UP-style run offline with its truth.

The sensor's figures and both uses: profiler/sim/README.md ("ARM-CO-UP's INA260 logger").
"""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from profiler.clock import Clock, perf_clock
from profiler.recordings.layout import RunLayout
from profiler.sim.serial_pty import PtyDevice

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


def sample(pieces: list[TruePiece], rng: np.random.Generator, update_ms: float = UPDATE_MS,
           gaps_ms: tuple[float, ...] = GAPS_MS, gap_p: tuple[float, ...] = GAP_P) -> str:
    """The logger's lines for a true power signal; readings ``gaps_ms`` apart with
    probabilities ``gap_p`` (each +-0.02 ms; ``(1.0,), (1.0,)``: a 1 kS/s logger)."""
    t0 = np.array([p.t0_ms for p in pieces])
    t1 = np.array([p.t1_ms for p in pieces])
    pw = np.array([p.power_mw for p in pieces])
    act = np.array([p.active for p in pieces])
    cum = np.r_[0.0, np.cumsum((t1 - t0) * pw)]
    end = float(t1[-1])

    def energy_to(t: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(t0, t, side="right") - 1, 0, len(pieces) - 1)
        return cum[i] + (np.minimum(t, t1[i]) - t0[i]) * pw[i]

    # enough gaps to reach the end (1.45 ms for the default mix, as it always was: the
    # draws, and so the default recordings, stay the same)
    mean_ms = 1.45 if gaps_ms == GAPS_MS else float(np.dot(gaps_ms, gap_p)) - 0.05
    n = int(end / mean_ms) + 10
    steps = rng.choice(gaps_ms, size=n, p=gap_p) + rng.uniform(-0.02, 0.02, n)
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
                 idle_ms: float = 400.0, jitter: float = 0.05, overrun_x: float = 0.0,
                 overrun_frames: tuple[int, ...] | None = None,
                 gaps_ms: tuple[float, ...] = GAPS_MS,
                 gap_p: tuple[float, ...] = GAP_P) -> SimulatedRun:
    """``layer_ms`` / ``layer_mw``: (settings, layers) nominal time and power of each layer.
    ``overrun_x``: the last layer's marker stays up this many times its time after the
    layer ends, the board idle at ``gap_mw`` (a marker window running into the idle, as
    on a second board of ARM-CO-UP's), in the frames of each setting ``overrun_frames``
    names (every frame: None); the truth and the console times stay the layer's own.
    ``gaps_ms`` / ``gap_p``: the logger's reading intervals (`sample`)."""
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
                if overrun_x > 0 and k == n_lay - 1 and (overrun_frames is None
                                                         or f in overrun_frames):
                    add(ms * overrun_x, gap_mw, True)
                console[s, k] += ms / layout.runs
                if f >= layout.warmup:
                    energy[s, k] += ms * mw
                    time[s, k] += ms
        add(17.0, gap_mw, False)  # the last sleep and the blip (pin 1)
        add(idle_ms * rng.uniform(0.98, 1.02), gap_mw - 200.0, True)  # waiting: pin 0
    text = sample(pieces, rng, gaps_ms=gaps_ms, gap_p=gap_p)
    return SimulatedRun(text=text, layout=layout, truth_power_mw=energy / time,
                        truth_time_ms=time / layout.frames, console_ms=console)


# ---------------------------------------------------------------------------
# The logger on a pty

#: power_w(t_s, markers) -> watts, vectorised (as `profiler.sim.virtual_logger.PowerFn`).
PowerFn = Callable[[np.ndarray, np.ndarray], "np.ndarray | float"]


class Ina260Model:
    """The sensor and the sketch's timing, reading by reading, as time passes.

    ``register_mw(t_ms, mean_mw)``: what a reading at each time ``t_ms`` (sorted) shows:
    the mean power over the last conversion completed by then (``mean_mw(a, b)`` gives
    the true mean over conversion windows [a, b]), plus that conversion's noise, in 10 mW
    steps. A conversion read twice shows the same value, as the real register does.
    """

    def __init__(self, seed: int = 0, update_ms: float = UPDATE_MS, noise_mw: float = NOISE_MW,
                 step_mw: float = POWER_STEP_MW) -> None:
        self.rng = np.random.default_rng(seed)
        self.update_ms = float(update_ms)
        self.noise_mw = float(noise_mw)
        self.step_mw = float(step_mw)
        self.phase_ms = float(self.rng.uniform(0.0, update_ms))
        self._noise = np.zeros(0)
        self._noise_base = 0  # update number of _noise[0]
        self._last: tuple[int, float] | None = None  # (update number, true mean) last read

    def reading_gaps_ms(self, n: int) -> np.ndarray:
        """The sketch's loop: the next ``n`` gaps between readings."""
        return self.rng.choice(GAPS_MS, size=n, p=GAP_P) + self.rng.uniform(-0.02, 0.02, n)

    def _noise_of(self, update: np.ndarray) -> np.ndarray:
        top = int(update.max()) - self._noise_base + 1
        if top > self._noise.size:
            more = self.rng.normal(0.0, self.noise_mw, max(top - self._noise.size, 256))
            self._noise = np.concatenate((self._noise, more))
        low = int(update.min()) - self._noise_base
        if low > 4096:  # conversions never read again
            self._noise = self._noise[low:]
            self._noise_base += low
        return self._noise[update - self._noise_base]

    def register_mw(self, t_ms: np.ndarray,
                    mean_mw: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        u = self.update_ms
        update = np.floor((np.asarray(t_ms) - self.phase_ms) / u).astype(np.int64)
        uniq, inv = np.unique(update, return_inverse=True)
        true = np.empty(uniq.size)
        fresh = np.ones(uniq.size, bool)
        if self._last is not None and uniq[0] == self._last[0]:
            true[0], fresh[0] = self._last[1], False  # read before, in the last batch
        if fresh.any():
            ends = uniq[fresh] * u + self.phase_ms
            true[fresh] = mean_mw(ends - u, ends)
        self._last = (int(uniq[-1]), float(true[-1]))
        value = true[inv] + self._noise_of(update)
        return np.round(value / self.step_mw) * self.step_mw


@dataclass
class Ina260Counters:
    readings: int = 0
    lines_sent: int = 0
    lines_dropped: int = 0  # the host did not read: the USB-serial buffer overflowed
    bytes_sent: int = 0
    lines_garbled: int = 0
    pins_flipped: int = 0


class VirtualIna260(PtyDevice):
    """ARM-CO-UP's logger sketch (``digitalRead(13), millis(), ina260.readPower()``,
    printed with no delay) on a pty. Use as a context manager or call start()/close().

    The host moves the pin with ``set_markers(levels)`` (bit 0; what the ``sim`` marker
    back end calls); the logger's clock runs at ``1 + drift_ppm * 1e-6`` times the
    host's from ``start_us`` (``true_clock()`` is the exact device -> host map). A thread
    prints every reading once its time has passed: the sensor's true input is
    ``power_w`` sampled every ``grid_us`` over each conversion. Faults, as the host sees
    them: ``flip_pin(n)`` (the next n readings show the other pin level: a glitch on
    the line), ``garble_line()`` (the next line arrives cut), ``close_port()`` (the
    cable is pulled), ``freeze()`` (the sketch hangs, the port stays).
    """

    thread_name = "virtual-ina260"
    counters: Ina260Counters

    def __init__(self, power_w: PowerFn | float = 3.0, *, seed: int = 0,
                 update_ms: float = UPDATE_MS, noise_mw: float = NOISE_MW,
                 start_us: int = 0, drift_ppm: float = 0.0, clock: Clock = perf_clock,
                 tick_s: float = 0.005, grid_us: float = 50.0,
                 tx_buffer_bytes: int = 1 << 16) -> None:
        super().__init__(start_us=start_us, drift_ppm=drift_ppm, clock=clock, tick_s=tick_s,
                         tx_buffer_bytes=tx_buffer_bytes)
        self.power_w = power_w
        self.model = Ina260Model(seed, update_ms, noise_mw)
        self.grid_us = float(grid_us)
        self.counters = Ina260Counters()
        self._hist_t: list[float] = []  # device us of each pin change (and the start)
        self._hist_lv: list[int] = []
        self._next_ms = 0.0  # device time of the next reading
        self._gaps = np.zeros(0)
        self._flips: list[tuple[float, int]] = []  # (device ms, readings) still to flip
        self._garble = 0

    # -- clock -------------------------------------------------------------------------
    def device_us(self, host_ns: int | None = None) -> float:
        """The logger's clock (us) at host time ``host_ns`` (default: now)."""
        h = self.clock() if host_ns is None else host_ns
        return self.start_us + (h - self._origin_ns) * (1.0 + self.drift_ppm * 1e-6) / 1000.0

    # -- lifecycle ---------------------------------------------------------------------
    def _on_start(self) -> None:
        now = self.device_us()
        self._hist_t, self._hist_lv = [now], [self._level]
        self._next_ms = now / 1000.0 + self.model.update_ms  # the first conversion completes

    # -- host side ---------------------------------------------------------------------
    def set_markers(self, levels: int) -> None:
        """Drive the logger's pin (bit 0 of ``levels``)."""
        level = levels & 1
        with self._lock:
            if level == self._level:
                return
            self._level = level
            self._hist_t.append(self.device_us())
            self._hist_lv.append(level)

    @property
    def markers(self) -> int:
        return self._level

    # -- faults ------------------------------------------------------------------------
    def flip_pin(self, n: int = 1) -> None:
        """The next ``n`` readings from now show the pin at the other level (a spurious
        pulse)."""
        with self._lock:
            self._flips.append((self.device_us() / 1000.0, n))

    def garble_line(self, n: int = 1) -> None:
        """The next ``n`` lines arrive cut after their second field."""
        with self._lock:
            self._garble += n

    # -- the sketch's loop -------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            if self._frozen.is_set():
                self._stop.wait(self.tick_s)
                continue
            if self._master < 0:
                break
            try:  # the sketch reads nothing; drain what the host writes
                r, _, _ = select.select([self._master], [], [], self.tick_s)
                if r:
                    os.read(self._master, 4096)
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EINTR):
                    break
            self._produce()
            if not self._flush():
                break

    def _take_times(self, upto_ms: float) -> np.ndarray:
        out = []
        t = self._next_ms
        while t <= upto_ms:
            if self._gaps.size == 0:
                self._gaps = self.model.reading_gaps_ms(512)
            out.append(t)
            t += float(self._gaps[0])
            self._gaps = self._gaps[1:]
        self._next_ms = t
        return np.asarray(out)

    def _produce(self) -> None:
        with self._lock:
            now_ms = self.device_us() / 1000.0
            t = self._take_times(now_ms)
            if t.size == 0:
                return
            hist_t = np.asarray(self._hist_t)
            hist_lv = np.asarray(self._hist_lv, dtype=np.int64)
            # keep the level in force before the earliest conversion still to be read
            keep = int(np.searchsorted(hist_t, (self._next_ms - 2 * self.model.update_ms)
                                       * 1000.0, side="right")) - 1
            if keep > 0:
                del self._hist_t[:keep], self._hist_lv[:keep]
            flips = []
            for at, n in self._flips:
                k = int(np.searchsorted(t, at))
                flips.append((k, min(n, t.size - k)))
            self._flips = [(t[-1] + 1e-9, n - m) for (_, n), (_, m) in zip(self._flips, flips,
                                                                          strict=True) if n > m]
            garble, self._garble = min(self._garble, t.size), max(self._garble - t.size, 0)

        def level_at(us: np.ndarray) -> np.ndarray:
            return hist_lv[np.clip(np.searchsorted(hist_t, us, side="right") - 1, 0, None)]

        grid = self.grid_us / 1000.0
        power = self.power_w

        def mean_mw(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            n = max(1, int(round(self.model.update_ms / grid)))
            ts = a[:, None] + (np.arange(n) + 0.5) * ((b - a) / n)[:, None]
            if callable(power):
                w = np.asarray(power(ts.ravel() / 1000.0, level_at(ts.ravel() * 1000.0)),
                               dtype=np.float64)
                w = np.broadcast_to(w, (ts.size,)).reshape(ts.shape)
            else:
                w = np.full(ts.shape, float(power))
            return w.mean(axis=1) * 1000.0

        mw = self.model.register_mw(t, mean_mw)
        pin = level_at(t * 1000.0)
        for k, m in flips:
            pin[k:k + m] ^= 1
            self.counters.pins_flipped += m
        millis = np.floor(t).astype(np.int64)
        lines = [f"{p},{m},{v:.2f}\r\n" for p, m, v in zip(pin, millis, mw, strict=True)]
        for k in range(garble):
            lines[k] = lines[k].rsplit(",", 1)[0] + "\r\n"
        self.counters.lines_garbled += garble
        self.counters.readings += t.size
        for line in lines:
            data = line.encode()
            if len(self._tx) + len(data) > self.tx_buffer_bytes:
                self.counters.lines_dropped += 1
                continue
            self._tx += data
            self.counters.lines_sent += 1
