"""Package data of coupprof, installed as ``profiler.data`` (see pyproject's package-dir).

Only ``boards/*.toml`` and ``models/*.tflite`` ship in the wheel; read them through
``profiler.resources``. ``validation/`` stays in the checkout.
"""
