#include "robust.cuh"
SW_DEFINE_ROBUST16(launch_robust_bf16, __nv_bfloat16)
