"""Zoo architectures, one module each; every module has a function returning a `GraphBuilder`."""
