"""Recordings made by other tools, attributed per layer without a host clock.

- `traces`: read a power trace with marker columns (ARM-CO-UP's ``pin,millis,mW`` logs,
  or any CSV whose columns are named by options) into a `Recording`;
- `console`: read the board's console log (ARM-CO-UP ``time_*.txt``) for layer times;
- `layout`: the windows a run is expected to have made (settings x frames x layers);
- `align`: match those windows to the observed marker segments by order and duration,
  flagging the frames that hold a missed or spurious edge;
- `attribute`: per-layer power by ARM-CO-UP's method and by coupprof's own;
- `armcoup_tables`: ARM-CO-UP's derived ``Layers.csv`` / ``Transfers.csv`` as
  coupprof layer and transfer tables;
- `output`: the layer, comparison and sidecar files `coupprof import` writes;
- `live`: a layer run recorded through such a logger (``--power ina260:PORT`` or
  ``sim:ina260``), where the host knows every window's duration and time.

A simulated INA260-on-an-Arduino logger like ARM-CO-UP's, with known truth, is the
simulated board's (`profiler.sim.ina260`).
"""
