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


// ---------------------------------------------------------------------------------
// 16-bit inputs, d even: each thread owns NPAIR pairs of adjacent coordinates, loads
// each row's pair as one 32-bit word, and sorts both coordinates at once with packed
// bf16x2 / f16x2 min/max (exact: the values are only compared and moved, and NaN and
// -0 were already replaced). Selection, averaging and sums then run in fp32 exactly as
// in robust_kernel, so results are bit-identical to the reference.
namespace swarmshake {

template <typename T> struct Packed;
template <> struct Packed<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr unsigned EXP = 0x7F80u, INF = 0x7F80u;
  static __device__ __forceinline__ T2 min2(T2 a, T2 b) { return __hmin2(a, b); }
  static __device__ __forceinline__ T2 max2(T2 a, T2 b) { return __hmax2(a, b); }
  static __device__ __forceinline__ float lo32(unsigned w) { return __uint_as_float(w << 16); }
  static __device__ __forceinline__ float hi32(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
};
template <> struct Packed<__half> {
  using T2 = __half2;
  static constexpr unsigned EXP = 0x7C00u, INF = 0x7C00u;
  static __device__ __forceinline__ T2 min2(T2 a, T2 b) { return __hmin2(a, b); }
  static __device__ __forceinline__ T2 max2(T2 a, T2 b) { return __hmax2(a, b); }
  static __device__ __forceinline__ float lo32(unsigned w) { return __half2float(__ushort_as_half((unsigned short)w)); }
  static __device__ __forceinline__ float hi32(unsigned w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
};

template <typename T, int KP>
__device__ __forceinline__ void bitonic_sort_x2(unsigned (&v)[KP]) {
  using P = Packed<T>;
  using T2 = typename P::T2;
#pragma unroll
  for (int size = 2; size <= KP; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
#pragma unroll
      for (int i = 0; i < KP; ++i) {
        const int l = i ^ stride;
        if (l > i) {
          T2 a, b;
          memcpy(&a, &v[i], 4);
          memcpy(&b, &v[l], 4);
          const T2 lo = P::min2(a, b), hi = P::max2(a, b);
          unsigned ulo, uhi;
          memcpy(&ulo, &lo, 4);
          memcpy(&uhi, &hi, 4);
          if ((i & size) == 0) { v[i] = ulo; v[l] = uhi; } else { v[i] = uhi; v[l] = ulo; }
        }
      }
    }
  }
}

__device__ __forceinline__ float mid_or_nan(float fa, float fb, int lo, int hi, int n) {
  const float r = (lo == hi) ? fa : __fadd_rn(__fmul_rn(fa, 0.5f), __fmul_rn(fb, 0.5f));
  return n == 0 ? __int_as_float(0x7fc00000) : r;
}

// Results of both coordinates of a sorted pair column (median: OP 0, trimmed mean: OP 1).
template <typename T, int KP, int OP>
__device__ __forceinline__ void finish_pair(const unsigned (&v)[KP], int n0, int n1, int trim, float* r0,
                                            float* r1) {
  using P = Packed<T>;
  if (OP == 0) {
    const int lo0 = (n0 > 0 ? n0 - 1 : 0) >> 1, hi0 = n0 >> 1;
    const int lo1 = (n1 > 0 ? n1 - 1 : 0) >> 1, hi1 = n1 >> 1;
    unsigned a0 = 0, b0 = 0, a1 = 0, b1 = 0;
    if (n0 == n1) {  // the usual case: one selection serves both halves
#pragma unroll
      for (int i = 0; i < KP; ++i) {
        a0 = (i == lo0) ? v[i] : a0;
        b0 = (i == hi0) ? v[i] : b0;
      }
      a1 = a0;
      b1 = b0;
    } else {
#pragma unroll
      for (int i = 0; i < KP; ++i) {
        a0 = (i == lo0) ? v[i] : a0;
        b0 = (i == hi0) ? v[i] : b0;
        a1 = (i == lo1) ? v[i] : a1;
        b1 = (i == hi1) ? v[i] : b1;
      }
    }
    *r0 = mid_or_nan(P::lo32(a0), P::lo32(b0), lo0, hi0, n0);
    *r1 = mid_or_nan(P::hi32(a1), P::hi32(b1), lo1, hi1, n1);
  } else {
    const int h0 = (n0 > 0 ? n0 - 1 : 0) >> 1, h1 = (n1 > 0 ? n1 - 1 : 0) >> 1;
    const int lo0 = trim < h0 ? trim : h0, lo1 = trim < h1 ? trim : h1;
    const int hi0 = n0 - 1 - lo0, hi1 = n1 - 1 - lo1;
    float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
    for (int i = 0; i < KP; ++i) {
      if (i >= lo0 && i <= hi0) acc0 = __fadd_rn(acc0, P::lo32(v[i]));
      if (i >= lo1 && i <= hi1) acc1 = __fadd_rn(acc1, P::hi32(v[i]));
    }
    const float q0 = __fdiv_rn(acc0, (float)(hi0 - lo0 + 1)), q1 = __fdiv_rn(acc1, (float)(hi1 - lo1 + 1));
    *r0 = n0 == 0 ? __int_as_float(0x7fc00000) : q0;
    *r1 = n1 == 0 ? __int_as_float(0x7fc00000) : q1;
  }
}

template <typename T, int KP, int NPAIR, int OP>
__global__ void __launch_bounds__(256) robust_kernel_x2(const T* __restrict__ x, T* __restrict__ out, int k,
                                                        int64_t d, int trim) {
  using P = Packed<T>;
  const int64_t dp = d >> 1;  // pairs per row
  const int64_t base = (int64_t)blockIdx.x * blockDim.x * NPAIR + threadIdx.x;
  const unsigned* xw = reinterpret_cast<const unsigned*>(x);
  unsigned v[NPAIR][KP];
#pragma unroll
  for (int j = 0; j < NPAIR; ++j) {
    const int64_t p = base + (int64_t)j * blockDim.x;
#pragma unroll
    for (int i = 0; i < KP; ++i)
      v[j][i] = (i < k && p < dp) ? __ldg(xw + (int64_t)i * dp + p) : (P::INF | (P::INF << 16));
  }
#pragma unroll
  for (int j = 0; j < NPAIR; ++j) {
    const int64_t p = base + (int64_t)j * blockDim.x;
    // both halves at once with 32-bit integer ops (no carry crosses the halves):
    // non-finite <=> exponent all ones <=> (h & 0x7fff) + (0x8000 - EXP) sets bit 15
    unsigned cnt = 0;  // finite counts of the low and high coordinate, in bits 0 and 16
#pragma unroll
    for (int i = 0; i < KP; ++i) {
      const unsigned w = v[j][i];
      const unsigned mag = w & 0x7fff7fffu;
      const unsigned nf = (mag + (0x8000u - P::EXP) * 0x10001u) & 0x80008000u;
      const unsigned m = nf | (nf - (nf >> 15));          // 0xffff in each non-finite half
      const unsigned nz = (mag + 0x7fff7fffu) & 0x80008000u;  // sign kept only where mag != 0
      const unsigned c = mag | (w & nz);                    // -0 -> +0
      v[j][i] = (c & ~m) | ((P::INF * 0x10001u) & m);       // non-finite -> +inf
      cnt += (~nf & 0x80008000u) >> 15;                     // padding rows are +inf: not counted
    }
    const int n0 = (int)(cnt & 0xffffu), n1 = (int)(cnt >> 16);
    bitonic_sort_x2<T, KP>(v[j]);
    float r0, r1;
    finish_pair<T, KP, OP>(v[j], n0, n1, trim, &r0, &r1);
    if (p < dp) {
      const T t0 = from_f32<T>(r0), t1 = from_f32<T>(r1);
      unsigned short h0, h1;
      memcpy(&h0, &t0, 2);
      memcpy(&h1, &t1, 2);
      reinterpret_cast<unsigned*>(out)[p] = (unsigned)h0 | ((unsigned)h1 << 16);
    }
  }
}

template <typename T, int OP>
bool launch_robust_x2(const T* x, T* out, int k, int64_t d, int trim, cudaStream_t stream) {
  if (d % 2 != 0 || reinterpret_cast<uintptr_t>(x) % 4 != 0 || reinterpret_cast<uintptr_t>(out) % 4 != 0) return false;
  static const bool off = [] {
    const char* e = getenv("SWARMSHAKE_ROBUST_PACKED");
    return e && e[0] == '0';
  }();
  if (off) return false;
  const int threads = 256;
  const int64_t dp = d / 2;
#define SW_LAUNCH2(KP, NPAIR)                                                                      \
  {                                                                                                \
    const int64_t per = (int64_t)threads * NPAIR;                                                  \
    const unsigned blocks = (unsigned)((dp + per - 1) / per);                                      \
    robust_kernel_x2<T, KP, NPAIR, OP><<<blocks, threads, 0, stream>>>(x, out, k, d, trim);        \
    return true;                                                                                   \
  }
  static const int np_env = [] {  // SWARMSHAKE_ROBUST_NPAIR=2|4: tuning knob for k = 5..16
    const char* e = getenv("SWARMSHAKE_ROBUST_NPAIR");
    return e ? atoi(e) : 0;
  }();
  if (k <= 2) SW_LAUNCH2(2, 2);
  if (k <= 4) SW_LAUNCH2(4, 2);
  // one pair per thread for k = 5..16 (bf16 at d = 32M: k = 16 2.0-2.1 TB/s, against
  // 1.9-2.0 with two pairs and 1.8-2.0 with four)
  if (k <= 8) {
    if (np_env == 2) SW_LAUNCH2(8, 2);
    if (np_env == 4) SW_LAUNCH2(8, 4);
    SW_LAUNCH2(8, 1);
  }
  if (k <= 16) {
    if (np_env == 2) SW_LAUNCH2(16, 2);
    if (np_env == 4) SW_LAUNCH2(16, 4);
    SW_LAUNCH2(16, 1);
  }
  if (k <= 32) SW_LAUNCH2(32, 1);
  SW_LAUNCH2(64, 1);
#undef SW_LAUNCH2
}

}  // namespace swarmshake

// fp32 uses robust_kernel; bf16/fp16 the packed kernel when d is even (else robust_kernel).
#define SW_DEFINE_ROBUST(NAME, T)                                                                   \
  void NAME(const void* x, void* out, int k, int64_t d, int op, int trim, cudaStream_t stream) {    \
    if (op == 0)                                                                                    \
      swarmshake::launch_robust_op<T, 0>((const T*)x, (T*)out, k, d, trim, stream);                 \
    else                                                                                            \
      swarmshake::launch_robust_op<T, 1>((const T*)x, (T*)out, k, d, trim, stream);                 \
  }
#define SW_DEFINE_ROBUST16(NAME, T)                                                                 \
  void NAME(const void* x, void* out, int k, int64_t d, int op, int trim, cudaStream_t stream) {    \
    if (op == 0) {                                                                                  \
      if (!swarmshake::launch_robust_x2<T, 0>((const T*)x, (T*)out, k, d, trim, stream))            \
        swarmshake::launch_robust_op<T, 0>((const T*)x, (T*)out, k, d, trim, stream);               \
    } else {                                                                                        \
      if (!swarmshake::launch_robust_x2<T, 1>((const T*)x, (T*)out, k, d, trim, stream))            \
        swarmshake::launch_robust_op<T, 1>((const T*)x, (T*)out, k, d, trim, stream);               \
    }                                                                                               \
  }
