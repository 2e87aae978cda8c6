"""GPU and NPU processors through LiteRT's `CompiledModel` and `HardwareAccelerator`.

Each layer's sub-model is compiled for the accelerator alone first, and again with the CPU
added (reported as a CPU fallback, with LiteRT's reason) when some ops are not
accelerated. A missing accelerator is a `RuntimeUnavailableError` (exit 3) naming what is
missing. `run()` is `run_by_index` followed by reading every output into host memory, the
only completion signal LiteRT's Python API offers. ``accelerator="cpu"`` drives LiteRT's
CPU accelerator through the same code, for tests on machines without a GPU.

Why each choice: docs/measure.md ("GPU and NPU through LiteRT").
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import glob
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.boards.model import ProcessorSpec
from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError, ModelError, RuntimeUnavailableError
from profiler.executors.base import Executor, SubModel, TensorIO
from profiler.executors.logs import NativeLog, native_stderr
from profiler.runtime import runtime

if TYPE_CHECKING:  # LiteRT ships no type information: these name what is passed around
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.environment import Environment
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import Options

ACCELERATORS = ("gpu", "npu", "cpu")
# LiteRT's GPU accelerators that do not run over Vulkan (OpenCL, OpenGL).
OTHER_GPU_LIBS = {"libLiteRtGpuAccelerator.so", "libLiteRtOpenClAccelerator.so"}
READBACKS = ("run", "lazy")

# LiteRT's words when ops of a model cannot all run on the requested accelerator.
NOT_ACCELERATED = ("not accelerated", "kLiteRtHwAcceleratorCpu", "unsupported op",
                   "is not supported")
# ... and when the accelerator itself is missing.
MISSING = ("No adapters found", "Couldn't load Vulkan", "Failed to initialize WebGPU",
           "cannot open shared object file", "could not be loaded",
           "No compiler plugin found", "Failed to create delegate",
           "Failed to get or create delegate", "no GPU", "OpenCL is disabled")

# Where Vulkan ICD manifests live (the NVIDIA container toolkit uses the last).
ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d",
            "/usr/local/nvidia/share/vulkan/icd.d")
ICD_ENV = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES")
#: The Vulkan loader's soname, and a variable that names another (tests point it at a
#: file that is not there to see the missing-loader error on any machine).
VULKAN_LOADER = "libvulkan.so.1"
VULKAN_LOADER_ENV = "COUPPROF_VULKAN_LOADER"
VULKAN_FIX = ("install the Vulkan loader and the GPU driver's Vulkan ICD (Debian/Ubuntu: "
              "`sudo apt-get install libvulkan1` plus the driver's Vulkan package, e.g. "
              "mesa-vulkan-drivers, or the NVIDIA driver), or map the layers to a CPU "
              "processor (L or B)")
# LiteRT log lines about other accelerators, which say nothing about why the GPU failed.
NOT_GPU = ("NPU accelerator", "CompilerPlugin", "compiler plugin", "dispatch")


def _litert() -> ModuleType:
    try:
        from ai_edge_litert import compiled_model
    except ImportError as err:
        rt = runtime()  # no runtime at all says so first
        raise RuntimeUnavailableError(
            f"LiteRT's accelerators (its CompiledModel API) are not available: the runtime "
            f"here is {rt.name} {rt.version} ({err})",
            "install ai-edge-litert >= 2 (`pip install ai-edge-litert`, or ./setup.sh); "
            "tflite-runtime boards use a delegate (`delegate = ...` in the board profile), "
            "or map the layers to a CPU processor (L or B)") from None
    return compiled_model


def vulkan_icds() -> list[str]:
    """Vulkan ICD manifests on this machine."""
    found: list[str] = []
    for d in ICD_DIRS:
        found += sorted(glob.glob(os.path.join(d, "*.json")))
    return found


def vulkan_loader_error(loader: str | None = None) -> str | None:
    """Why the Vulkan loader cannot be loaded (the dynamic linker's words), or None.

    loader: a soname or path; default $COUPPROF_VULKAN_LOADER, else libvulkan.so.1.
    Loading it is what Dawn (LiteRT's WebGPU) does first, so this is the same test.
    """
    name = loader or os.environ.get(VULKAN_LOADER_ENV) or VULKAN_LOADER
    try:
        ctypes.CDLL(name)
    except OSError as err:
        return str(err)
    return None


def webgpu_only(litert_dir: Path | None = None) -> bool:
    """True when this LiteRT's only GPU accelerator is WebGPU (so G needs Vulkan).

    litert_dir: the ai_edge_litert package folder (default: the installed one, and then
    the system's library path counts too, since LiteRT also loads accelerators by name).
    """
    base = litert_dir or _litert_dir()
    if base is None:
        return False
    libs = {p.name for p in base.glob("libLiteRt*Accelerator.so")}
    if litert_dir is None:
        libs |= {n for n in OTHER_GPU_LIBS
                 if ctypes.util.find_library(n.removeprefix("lib").removesuffix(".so"))}
    return "libLiteRtWebGpuAccelerator.so" in libs and not libs & OTHER_GPU_LIBS


def _litert_dir() -> Path | None:
    try:
        import ai_edge_litert
    except ImportError:
        return None
    return Path(ai_edge_litert.__file__).parent


def ensure_vulkan_icd() -> str | None:
    """Point the Vulkan loader at the NVIDIA container toolkit's ICD when it is the only
    one and nothing is configured (the loader never looks there by itself).
    Returns what was set, or None."""
    if any(os.environ.get(k) for k in ICD_ENV):
        return None
    standard = [p for p in vulkan_icds() if not p.startswith("/usr/local/nvidia/")]
    nvidia = sorted(glob.glob("/usr/local/nvidia/share/vulkan/icd.d/*.json"))
    if standard or not nvidia:
        return None
    os.environ["VK_DRIVER_FILES"] = nvidia[0]
    return nvidia[0]


class CompiledSubModel(SubModel):
    """A sub-model compiled by LiteRT for an accelerator, with its own tensor buffers."""

    def __init__(self, cm: CompiledModel, name: str, fallback: bool, detail: str,
                 readback: str = "run") -> None:
        self.cm = cm
        self.name = name
        self.fallback = fallback
        self.fallback_detail = detail
        self.readback = readback
        sigs = cm.get_signature_list()
        key = next(iter(sigs))
        in_det = cm.get_input_tensor_details(key)
        out_det = cm.get_output_tensor_details(key)
        self.inputs = [_io(in_det[n]) for n in sigs[key]["inputs"]]
        self.outputs = [_io(out_det[n]) for n in sigs[key]["outputs"]]
        self._ins = cm.create_input_buffers(0)
        self._outs = cm.create_output_buffers(0)
        if len(self._ins) != len(self.inputs) or len(self._outs) != len(self.outputs):
            raise ModelError(f"{name}: LiteRT made {len(self._ins)}/{len(self._outs)} buffers for "
                             f"{len(self.inputs)} inputs / {len(self.outputs)} outputs")
        self._host: list[np.ndarray | None] = [None] * len(self.outputs)
        self._run = cm.run_by_index
        # The first write makes LiteRT set up a process-wide environment, which logs;
        # do it here (creation runs inside native_stderr) with zeros.
        for buf, spec in zip(self._ins, self.inputs, strict=True):
            buf.write(np.zeros(spec.shape, spec.dtype))

    def set_input(self, i: int, value: np.ndarray) -> None:
        spec = self.inputs[i]
        if value.dtype != spec.dtype or value.size != spec.size:
            raise ModelError(f"{self.name}: input {i} wants {spec.dtype}{list(spec.shape)}, "
                             f"got {value.dtype}{list(value.shape)}")
        self._ins[i].write(value)

    def run(self) -> None:
        self._run(0, self._ins, self._outs)
        if self.readback == "run":
            for i in range(len(self._outs)):
                self._host[i] = self._read(i)
        else:
            self._host = [None] * len(self._outs)

    def _read(self, i: int) -> np.ndarray:
        spec = self.outputs[i]
        return self._outs[i].read(spec.size, spec.dtype).reshape(spec.shape)

    def output(self, i: int) -> np.ndarray:
        host = self._host[i]
        if host is None:
            host = self._host[i] = self._read(i)
        return host

    def close(self) -> None:
        for buf in (*self._ins, *self._outs):
            with contextlib.suppress(ValueError, RuntimeError):
                buf.destroy()
        self._ins, self._outs, self._host = [], [], []
        self._run = _closed  # the bound run holds the compiled model (and its bytes) too
        if self.cm is not None:
            self.cm.close()
            self.cm = None


def _closed(*_: object) -> None:
    raise RuntimeError("the sub-model was closed")


def _io(detail: dict[str, Any]) -> TensorIO:
    return TensorIO(str(detail.get("name", "")), tuple(int(d) for d in detail["shape"]),
                    np.dtype(detail["dtype"]))


class AcceleratorExecutor(Executor):
    """A GPU or NPU (or, for tests, LiteRT's CPU accelerator) driven from host cores.

    allow_fallback: compile layers the accelerator cannot run whole with the CPU added
    (reported); False makes such a layer an error instead.
    threads: CPU threads for fallback ops (default 1: the host thread only drives).
    """

    kind = "accelerator"
    # CompiledModel.run (LiteRT 2.3's binding) does not release the GIL while it waits
    # for the accelerator (measured on an H100: data/validation/README.md)
    holds_gil = True

    def __init__(self, proc: ProcessorSpec, *, accelerator: str | None = None,
                 cores: Sequence[int] | None = None, threads: int | None = None,
                 allow_fallback: bool = True, readback: str = "run",
                 dispatch_library_path: str | None = None,
                 clock: Clock = perf_clock) -> None:
        accel = (accelerator or proc.accelerator or proc.kind).lower()
        if accel not in ACCELERATORS:
            raise BadInputError(f"processor {proc.letter}: unknown accelerator {accel!r}",
                                f"use one of: {', '.join(ACCELERATORS)}")
        if readback not in READBACKS:
            raise BadInputError(f"unknown readback mode {readback!r}",
                                f"use one of: {', '.join(READBACKS)}")
        self.accelerator = accel
        self.allow_fallback = allow_fallback
        self.readback = readback
        self.dispatch_library_path = dispatch_library_path
        self.env: Environment | None = None
        self.env_log = NativeLog()
        self.notes: list[str] = []
        super().__init__(proc, cores=cores, threads=threads, clock=clock)

    def default_threads(self) -> int:
        return 1

    # -- runtime -------------------------------------------------------------------

    def _accel_flag(self, with_cpu: bool) -> HardwareAccelerator:
        ha = _litert().HardwareAccelerator
        flag = {"gpu": ha.GPU, "npu": ha.NPU, "cpu": ha.CPU}[self.accelerator]
        return flag | ha.CPU if with_cpu else flag

    def _open_runtime(self) -> None:
        cm = _litert()
        if self.accelerator == "gpu":
            missing = vulkan_loader_error() if webgpu_only() else None
            if missing:
                raise RuntimeUnavailableError(
                    f"processor {self.proc.letter}: no Vulkan loader ({missing}); LiteRT's "
                    "GPU accelerator here is WebGPU, which runs over Vulkan", VULKAN_FIX)
            icd = ensure_vulkan_icd()
            if icd:
                self.notes.append(f"VK_DRIVER_FILES={icd} (set by coupprof)")
        with native_stderr() as log:
            try:
                if self.dispatch_library_path:
                    self.env = cm.Environment.create(
                        dispatch_library_path=self.dispatch_library_path)
                else:
                    self.env = cm.Environment.create()
            except (RuntimeError, ValueError) as err:
                raise self._unavailable(f"cannot create a LiteRT environment: {_first(err)}",
                                        log) from None
        self.env_log = log
        if self.accelerator == "npu" and not self.env.options.dispatch_library_path:
            raise RuntimeUnavailableError(
                f"processor {self.proc.letter}: no NPU dispatch library for LiteRT "
                "(no vendors/<vendor>/dispatch/libLiteRtDispatch_*.so in ai_edge_litert"
                " and none given)",
                "install the vendor's LiteRT NPU package (e.g. Qualcomm or MediaTek dispatch),"
                " or give the board profile a `delegate` library, or map the layers elsewhere")

    def _options(self, with_cpu: bool) -> Options:
        cm = _litert()
        opts = cm.Options(hardware_accelerators=self._accel_flag(with_cpu),
                          cpu_options=cm.CpuOptions(num_threads=self.threads))
        return opts

    def _compile(self, model_bytes: bytes, with_cpu: bool
                 ) -> tuple[CompiledModel | None, NativeLog, str]:
        cm = _litert()
        with native_stderr() as log:
            try:
                model = cm.CompiledModel.from_buffer(model_bytes, environment=self.env,
                                                     options=self._options(with_cpu))
                return model, log, ""
            except (RuntimeError, ValueError) as err:
                return None, log, _first(err)
        raise AssertionError("unreachable")  # pragma: no cover

    def _load(self, model_bytes: bytes, name: str) -> SubModel:
        model, log, err = self._compile(model_bytes, with_cpu=False)
        if model is not None:
            return self._wrap(model, name, False, "")
        missing = log.matching(*MISSING)
        partial = log.matching(*NOT_ACCELERATED)
        if not partial and _says(err, NOT_ACCELERATED):
            partial = [err]
        if missing and not partial:
            raise self._unavailable(f"{name}: {err or 'compilation failed'}", log)
        if not partial:
            raise ModelError(f"LiteRT cannot compile {name} for the {self.accelerator.upper()}: "
                             f"{_reason(err, log)}",
                             "check the layer's operators with `coupprof slice MODEL`")
        detail = _short(partial[0])
        if not self.allow_fallback:
            raise ModelError(f"{name} does not run wholly on the {self.accelerator.upper()} "
                             f"of processor {self.proc.letter}: {detail}",
                             "allow CPU fallback, or map this layer to a CPU processor")
        model, log2, err2 = self._compile(model_bytes, with_cpu=True)
        if model is None:
            if log2.matching(*MISSING):
                raise self._unavailable(f"{name}: {err2 or err}", log2)
            raise ModelError(f"LiteRT cannot compile {name} for the {self.accelerator.upper()} "
                             f"even with CPU fallback: {_reason(err2, log2)}",
                             "map this layer to a CPU processor")
        return self._wrap(model, name, True, detail)

    def _wrap(self, model: CompiledModel, name: str, fallback: bool, detail: str) -> SubModel:
        with native_stderr():
            sub = CompiledSubModel(model, name, fallback, detail, self.readback)
        return sub

    def _unavailable(self, what: str, log: NativeLog) -> RuntimeUnavailableError:
        lines = log.matching(*MISSING)
        if self.accelerator == "gpu":  # the GPU's own reasons first, other plugins' after
            lines = sorted(lines, key=lambda line: _says(line, NOT_GPU))
        reasons = [_short(line) for line in lines]
        seen: list[str] = []
        for r in reasons:
            if r not in seen:
                seen.append(r)
        why = "; ".join(seen[:3]) or what
        accel = self.accelerator.upper()
        if self.accelerator == "gpu":
            icds = vulkan_icds()
            fix = ("install the Vulkan loader (libvulkan1) and the GPU's Vulkan driver; "
                   + (f"point VK_DRIVER_FILES at one of {', '.join(icds)}" if icds and not any(
                       os.environ.get(k) for k in ICD_ENV) else
                      "check VK_DRIVER_FILES names the GPU's ICD json (e.g. nvidia_icd.json)")
                   + "; or map the layers to a CPU processor (L or B)")
        else:
            fix = "install the vendor's LiteRT dispatch library, or map the layers to L or B"
        return RuntimeUnavailableError(
            f"the LiteRT {accel} accelerator for processor {self.proc.letter} is unavailable: "
            f"{why}", fix)

    def _close_runtime(self, subs: list[SubModel]) -> None:
        # LiteRT logs each accelerator's destruction; keep that off the terminal too.
        with native_stderr():
            super()._close_runtime(subs)
            if self.env is not None:
                self.env.close()
                self.env = None
            gc.collect()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["accelerator"] = self.accelerator
        d["readback"] = self.readback
        if self.notes:
            d["notes"] = list(self.notes)
        return d


def _first(err: BaseException) -> str:
    lines = [line.strip(" └") for line in str(err).strip().splitlines() if line.strip()]
    # LiteRT's message is a stack of "ERROR: [file:line]" frames; keep the informative one.
    useful = [line for line in lines if not line.rstrip().endswith("]")]
    return (useful or lines or [type(err).__name__])[-1]


def _says(text: str, needles: Sequence[str]) -> bool:
    low = text.lower()
    return any(n.lower() in low for n in needles)


def _short(line: str) -> str:
    """A log line without its 'WARNING: [file.cc:12]' prefix."""
    text = line.strip(" └")
    for sep in ("] ", "]: "):
        if text.startswith(("INFO", "WARNING", "ERROR", "E0", "W0")) and sep in text:
            text = text.split(sep, 1)[1]
            break
    return text.strip()


def _reason(err: str, log: NativeLog) -> str:
    errors = [_short(line) for line in log.lines if line.startswith(("ERROR", "E0"))]
    return err or (errors[-1] if errors else "unknown error (set COUPPROF_LITERT_LOG=1 to see "
                   "LiteRT's log)")
