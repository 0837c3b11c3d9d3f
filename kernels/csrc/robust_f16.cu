#include "robust.cuh"
SW_DEFINE_ROBUST16(launch_robust_f16, __half)
