"""Reading, writing and inspecting .tflite flatbuffers with LiteRT's own schema.

`schema_py_generated` is that schema's flatc output with its object API (`ModelT` ...),
copied unchanged from ai-edge-litert 2.3.0: tflite-runtime ships no schema, and a board
that has only tflite-runtime must still slice models. One copy for every runtime keeps
written models byte-identical whichever runtime is installed. To refresh it (a newer
LiteRT's ops), copy the new ai_edge_litert/schema_py_generated.py over it and keep its
header; it is left out of ruff and mypy as generated code.
"""
