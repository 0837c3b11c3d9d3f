// Coordinate-wise median / trimmed mean over k <= 64 stacked rows.
//
// One thread owns VEC coordinates (strided by blockDim.x, so every load of a warp is
// one coalesced 32-element row segment) and keeps the k values of each in registers
// (padded to KP, a power of two, with +inf), canonicalises -0 to +0, replaces
// non-finite values by +inf while counting the n finite ones, sorts with an unrolled
// bitonic network (compile-time indices only: no local memory), then picks the
// median or sums the kept ranks in ascending order with IEEE round-to-nearest adds
// and one IEEE division -- exactly the torch reference in kernels/median.py.
#pragma once
#include <stdlib.h>

#include "common.cuh"

namespace swarmshake {

template <int KP>
__device__ __forceinline__ void bitonic_sort(float (&v)[KP]) {
#pragma unroll
  for (int size = 2; size <= KP; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
#pragma unroll
      for (int i = 0; i < KP; ++i) {
        const int l = i ^ stride;
        if (l > i) {
          const float a = v[i], b = v[l];
          const float lo = fminf(a, b), hi = fmaxf(a, b);
          if ((i & size) == 0) { v[i] = lo; v[l] = hi; } else { v[i] = hi; v[l] = lo; }
        }
      }
    }
  }
}

// OP 0: median; OP 1: trimmed mean.
template <typename T, int KP, int VEC, int OP>
__global__ void __launch_bounds__(256) robust_kernel(const T* __restrict__ x, T* __restrict__ out, int k,
                                                     int64_t d, int trim) {
  const int64_t base = (int64_t)blockIdx.x * blockDim.x * VEC + threadIdx.x;
  float v[VEC][KP];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const int64_t c = base + (int64_t)j * blockDim.x;
#pragma unroll
    for (int i = 0; i < KP; ++i) {
      v[j][i] = (i < k && c < d) ? to_f32<T>(ldg<T>(x + (int64_t)i * d + c)) : __int_as_float(0x7f800000);
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const int64_t c = base + (int64_t)j * blockDim.x;
    int n = 0;
#pragma unroll
    for (int i = 0; i < KP; ++i) {
      const float f = __fadd_rn(v[j][i], 0.0f);  // -0 -> +0
      const bool fin = isfinite(f) && i < k;
      n += fin ? 1 : 0;
      v[j][i] = fin ? f : __int_as_float(0x7f800000);
    }
    bitonic_sort<KP>(v[j]);
    float res;
    if (OP == 0) {
      const int lo = (n > 0 ? n - 1 : 0) >> 1, hi = n >> 1;
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int i = 0; i < KP; ++i) {
        a = (i == lo) ? v[j][i] : a;
        b = (i == hi) ? v[j][i] : b;
      }
      res = (lo == hi) ? a : __fadd_rn(__fmul_rn(a, 0.5f), __fmul_rn(b, 0.5f));
    } else {
      const int half = (n > 0 ? n - 1 : 0) >> 1;
      const int te = trim < half ? trim : half;
      const int lo = te, hi = n - 1 - te;
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < KP; ++i) {
        if (i >= lo && i <= hi) acc = __fadd_rn(acc, v[j][i]);
      }
      res = __fdiv_rn(acc, (float)(hi - lo + 1));
    }
    if (n == 0) res = __int_as_float(0x7fc00000);
    if (c < d) out[c] = from_f32<T>(res);
  }
}

template <typename T, int OP>
void launch_robust_op(const T* x, T* out, int k, int64_t d, int trim, cudaStream_t stream) {
  const int threads = 256;
#define SW_LAUNCH(KP, VEC)                                                                         \
  {                                                                                                \
    const int64_t per = (int64_t)threads * VEC;                                                    \
    const unsigned blocks = (unsigned)((d + per - 1) / per);                                       \
    robust_kernel<T, KP, VEC, OP><<<blocks, threads, 0, stream>>>(x, out, k, d, trim);             \
    return;                                                                                        \
  }
  // Coordinates per thread: 2 for k <= 16 (measured on the H100 at d = 32M: 2.6-2.9 TB/s,
  // against 2.4-2.6 with 4 and 1.6-2.8 with 8); SWARMSHAKE_ROBUST_VEC overrides it.
  static const int vec_env = [] {
    const char* e = getenv("SWARMSHAKE_ROBUST_VEC");
    return e ? atoi(e) : 0;
  }();
  if (k <= 1) SW_LAUNCH(1, 4);
  if (k <= 2) SW_LAUNCH(2, 4);
  if (k <= 4) {
    if (vec_env == 4) SW_LAUNCH(4, 4);
    if (vec_env == 8) SW_LAUNCH(4, 8);
    SW_LAUNCH(4, 2);
  }
  if (k <= 8) {
    if (vec_env == 4) SW_LAUNCH(8, 4);
    if (vec_env == 8) SW_LAUNCH(8, 8);
    SW_LAUNCH(8, 2);
  }
  if (k <= 16) {
    if (vec_env == 4) SW_LAUNCH(16, 4);
    SW_LAUNCH(16, 2);
  }
  if (k <= 32) {  // 1 coordinate per thread: 2.29 TB/s at k = 32 against 2.15 with 2
    if (vec_env == 2) SW_LAUNCH(32, 2);
    SW_LAUNCH(32, 1);
  }
  SW_LAUNCH(64, 1);
#undef SW_LAUNCH
}

}  // namespace swarmshake

#define SW_DEFINE_ROBUST(NAME, T)                                                                   \
  void NAME(const void* x, void* out, int k, int64_t d, int op, int trim, cudaStream_t stream) {    \
    if (op == 0)                                                                                    \
      swarmshake::launch_robust_op<T, 0>((const T*)x, (T*)out, k, d, trim, stream);                 \
    else                                                                                            \
      swarmshake::launch_robust_op<T, 1>((const T*)x, (T*)out, k, d, trim, stream);                 \
  }
