"""Which GPU does LiteRT's WebGPU accelerator use under a given environment?"""
import os, subprocess, sys, time
if sys.argv[1:2] == ["child"]:
    from profiler.zoo.registry import build
    from ai_edge_litert import compiled_model as cm
    import numpy as np
    env = cm.Environment.create()
    model = cm.CompiledModel.from_buffer(build("resnet50"), environment=env,
        options=cm.Options(hardware_accelerators=cm.HardwareAccelerator.GPU))
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    t0 = time.time(); n = 0
    while time.time() - t0 < 6:
        model.run_by_index(0, ins, outs); n += 1
    print("child ran", n, flush=True)
    sys.exit(0)
import pynvml
pynvml.nvmlInit()
hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
for i, h in enumerate(hs):
    print(i, pynvml.nvmlDeviceGetPciInfo(h).busId, flush=True)
configs = []
LAY = {"VK_LAYER_PATH": "/tmp/vk/layer", "VK_INSTANCE_LAYERS": "VK_LAYER_MESA_device_select", "LD_LIBRARY_PATH": "/tmp/vk/lib"}
did = pynvml.nvmlDeviceGetPciInfo(hs[0]).pciDeviceId
vid, dev = did & 0xffff, did >> 16
print("ids", hex(vid), hex(dev), flush=True)
r = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('MESA_VK_DEVICE_SELECT'))"], env=dict(os.environ, **LAY, MESA_VK_DEVICE_SELECT="list"))
configs.append(("list+child", dict(LAY, MESA_VK_DEVICE_SELECT="list")))
configs.append(("vid:did!", dict(LAY, MESA_VK_DEVICE_SELECT=f"{vid:x}:{dev:x}!")))
for i, h in enumerate(hs):
    b = pynvml.nvmlDeviceGetPciInfo(h).busId
    b = b.decode() if isinstance(b, bytes) else b
    dom, bus, rest = b.split(":")[-3:]
    dev, fn = rest.split(".")
    tag = f"pci-{int(dom,16):04x}_{int(bus,16):02x}_{int(dev,16):02x}_{int(fn,16)}"
    configs.append((f"DRI_PRIME={tag}", {"DRI_PRIME": tag, "VK_LAYER_PATH": "/tmp/vk/layer",
        "VK_INSTANCE_LAYERS": "VK_LAYER_MESA_device_select",
        "LD_LIBRARY_PATH": "/tmp/vk/lib", "MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE": "0"}))
for name, extra in configs:
    e = dict(os.environ, **extra)
    p = subprocess.Popen([sys.executable, __file__, "child"], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    util = [0.0] * len(hs); k = 0
    while p.poll() is None:
        for i, h in enumerate(hs):
            util[i] += pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        k += 1; time.sleep(0.2)
    out = p.stdout.read()
    print(f"{name}: mean util per GPU {[round(u / max(k,1)) for u in util]}; rc {p.returncode}; "
          f"{[l for l in out.splitlines() if 'WARNING: [' not in l][:12]}", flush=True)
