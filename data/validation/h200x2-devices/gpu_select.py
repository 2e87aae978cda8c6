"""Which GPU does LiteRT's WebGPU accelerator use under a given environment?

Runs ResNet50 on G in a child process for 6 s per candidate environment and prints
each GPU's mean utilisation meanwhile (NVML): the GPU that is busy is the one picked.
"""
import os
import subprocess
import sys
import time


def child() -> None:
    from ai_edge_litert import compiled_model as cm

    from profiler.zoo.registry import build

    env = cm.Environment.create()
    model = cm.CompiledModel.from_buffer(
        build("resnet50"), environment=env,
        options=cm.Options(hardware_accelerators=cm.HardwareAccelerator.GPU))
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    t0, n = time.time(), 0
    while time.time() - t0 < 6:
        model.run_by_index(0, ins, outs)
        n += 1
    print("child ran", n, flush=True)


def pci_tag(bus_id: str) -> str:
    dom, bus, rest = bus_id.split(":")[-3:]
    dev, fn = rest.split(".")
    return f"pci-{int(dom, 16):04x}_{int(bus, 16):02x}_{int(dev, 16):02x}_{int(fn, 16)}"


def main() -> None:
    import pynvml

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    bus_ids = []
    for i, h in enumerate(handles):
        b = pynvml.nvmlDeviceGetPciInfo(h).busId
        bus_ids.append(b.decode() if isinstance(b, bytes) else b)
        print(i, bus_ids[-1], flush=True)
    layer = {"VK_LAYER_PATH": "/tmp/vk/layer", "VK_INSTANCE_LAYERS": "VK_LAYER_MESA_device_select",
             "LD_LIBRARY_PATH": "/tmp/vk/lib"}
    did = pynvml.nvmlDeviceGetPciInfo(handles[0]).pciDeviceId
    vid, dev = did & 0xFFFF, did >> 16
    print("ids", hex(vid), hex(dev), flush=True)
    configs = [("list", dict(layer, MESA_VK_DEVICE_SELECT="list")),
               ("vid:did!", dict(layer, MESA_VK_DEVICE_SELECT=f"{vid:x}:{dev:x}!"))]
    for b in bus_ids:
        tag = pci_tag(b)
        configs.append((f"DRI_PRIME={tag}", dict(
            layer, DRI_PRIME=tag, MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE="0")))
    for name, extra in configs:
        p = subprocess.Popen([sys.executable, __file__, "child"], env=dict(os.environ, **extra),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        util, k = [0.0] * len(handles), 0
        while p.poll() is None:
            for i, h in enumerate(handles):
                util[i] += pynvml.nvmlDeviceGetUtilizationRates(h).gpu
            k += 1
            time.sleep(0.2)
        out = p.stdout.read() if p.stdout else ""
        lines = [ln for ln in out.splitlines() if "WARNING: [" not in ln][:12]
        print(f"{name}: mean util per GPU {[round(u / max(k, 1)) for u in util]}; "
              f"rc {p.returncode}; {lines}", flush=True)


if __name__ == "__main__":
    child() if sys.argv[1:2] == ["child"] else main()
