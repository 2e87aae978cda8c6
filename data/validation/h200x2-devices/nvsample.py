"""Sample every GPU's utilisation and power every 50 ms into a CSV until killed."""
import sys
import time

import pynvml

pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
with open(sys.argv[1], "w") as f:
    f.write("t_s,gpu,util_pct,power_w,sm_mhz\n")
    t0 = time.time()
    while True:
        for i, h in enumerate(handles):
            f.write(f"{time.time() - t0:.2f},{i},{pynvml.nvmlDeviceGetUtilizationRates(h).gpu},"
                    f"{pynvml.nvmlDeviceGetPowerUsage(h) / 1000:.1f},"
                    f"{pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)}\n")
        f.flush()
        time.sleep(0.05)
