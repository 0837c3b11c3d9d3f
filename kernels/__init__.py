"""GPU kernels of the node's hot paths (robust aggregation, tensor fingerprints,
int8 gradient compression), each with a plain torch reference kept beside it and
a dispatcher that picks the kernel for CUDA tensors and the reference elsewhere.
"""
