"""The papers' figures from coupprof's CSVs, one module per plot kind.

    from profiler.plots import efficiency_figure, layers_figure, transfers_figure, timeline_figure
    fig = efficiency_figure(pd.read_csv("sweep/sweep.csv"))   # a matplotlib Figure
    save(fig, "efficiency.png")

- `efficiency`: FPS/W per layer vs frequency, one panel per processor (ARM-CO-UP Fig. 16)
- `layers`: time, energy and FPS/W per layer, processors side by side (Fig. 17)
- `transfers`: src -> dst hand-over time per layer boundary (Fig. 18)
- `timeline`: one frame's power trace with the layer windows shaded
- `pareto`: `coupprof explore`'s candidates, front and pick

Every function raises `BadInputError` naming the missing columns and the command
that writes them. Matplotlib runs on the Agg backend (no display needed).
"""

from profiler.plots.common import read_csv, save
from profiler.plots.efficiency import efficiency_figure
from profiler.plots.layers import layers_figure
from profiler.plots.pareto import pareto_figure
from profiler.plots.timeline import timeline_figure
from profiler.plots.transfers import transfers_figure

KINDS = ("efficiency", "layers", "transfers", "timeline", "pareto")

__all__ = ["KINDS", "efficiency_figure", "layers_figure", "pareto_figure", "read_csv", "save",
           "timeline_figure", "transfers_figure"]
