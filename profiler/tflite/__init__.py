"""Reading, writing and inspecting .tflite flatbuffers with LiteRT's own schema."""
