"""Model zoo: architecture-faithful .tflite models written directly with LiteRT's
flatbuffer schema, with seeded weights (no TensorFlow needed).

    from profiler import zoo
    zoo.list_models()                      # [ZooEntry(name, description, params, default_params)]
    data = zoo.build("resnet50", size=64)  # .tflite bytes, same bytes for the same params
    path = zoo.model_path("googlenet")     # built once into $COUPPROF_CACHE/models/
    zoo.default_model_path()               # data/models/mobilenet_v1_0.25_128.tflite

The models: MobileNetV1 (FP32 and int8), ResNet-50 (Keras' and TF-slim's layouts),
GoogLeNet, SqueezeNet 1.1 and 1.0, AlexNet (one tower and Caffe's), and AutoDiCE's
three at the ONNX model zoo's layouts: VGG-19 (`arch/vgg.py`), ResNet-101 v1
(`arch/resnet.py`) and DenseNet-121 (`arch/densenet.py`). `coupprof zoo --list`
describes each, with its parameters, operator count and MACs.

`profiler.zoo.armcoup` names the zoo models that build ARM-CO-UP's five CNNs and cuts
them into ARM-CO-UP's layers (docs/armcoup-layers.md).
"""

from profiler.zoo.registry import (
    DEFAULT_MODEL_FILE,
    ZooEntry,
    build,
    build_default_model,
    cache_dir,
    default_model_path,
    graph,
    list_models,
    model_path,
    resolve_params,
    summary,
    write_default_model,
)

__all__ = [
    "DEFAULT_MODEL_FILE",
    "ZooEntry",
    "build",
    "build_default_model",
    "cache_dir",
    "default_model_path",
    "graph",
    "list_models",
    "model_path",
    "resolve_params",
    "summary",
    "write_default_model",
]
