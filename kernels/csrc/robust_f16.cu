#include "robust.cuh"
SW_DEFINE_ROBUST(launch_robust_f16, __half)
