// Shared helpers of the swarmshake CUDA kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace swarmshake {

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

// Round-to-nearest-even, as torch's .to(dtype).
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

template <typename T> __device__ __forceinline__ T ldg(const T* p) { return __ldg(p); }
template <> __device__ __forceinline__ __nv_bfloat16 ldg<__nv_bfloat16>(const __nv_bfloat16* p) {
  unsigned short u = __ldg(reinterpret_cast<const unsigned short*>(p));
  return __ushort_as_bfloat16(u);
}
template <> __device__ __forceinline__ __half ldg<__half>(const __half* p) {
  unsigned short u = __ldg(reinterpret_cast<const unsigned short*>(p));
  return __ushort_as_half(u);
}

// 4 consecutive values (16 bytes of fp32, 8 of a 16-bit type; aligned by the caller).
template <typename T> __device__ __forceinline__ void load4(const T* p, float (&v)[4]);
template <> __device__ __forceinline__ void load4<float>(const float* p, float (&v)[4]) {
  const float4 f = __ldcs(reinterpret_cast<const float4*>(p));
  v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
}
template <typename T> __device__ __forceinline__ void load4_16(const T* p, float (&v)[4]) {
  const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p));
  const unsigned short h[4] = {(unsigned short)(u.x & 0xffff), (unsigned short)(u.x >> 16),
                               (unsigned short)(u.y & 0xffff), (unsigned short)(u.y >> 16)};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    T t;
    if constexpr (sizeof(T) == 2) memcpy(&t, &h[e], 2);
    v[e] = to_f32<T>(t);
  }
}
template <> __device__ __forceinline__ void load4<__nv_bfloat16>(const __nv_bfloat16* p, float (&v)[4]) { load4_16(p, v); }
template <> __device__ __forceinline__ void load4<__half>(const __half* p, float (&v)[4]) { load4_16(p, v); }

template <typename T> __device__ __forceinline__ void store4(T* p, float a, float b, float c, float d);
template <> __device__ __forceinline__ void store4<float>(float* p, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}
template <typename T> __device__ __forceinline__ void store4_16(T* p, float a, float b, float c, float d) {
  const T t[4] = {from_f32<T>(a), from_f32<T>(b), from_f32<T>(c), from_f32<T>(d)};
  unsigned short h[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) memcpy(&h[e], &t[e], 2);
  uint2 u;
  u.x = (unsigned)h[0] | ((unsigned)h[1] << 16);
  u.y = (unsigned)h[2] | ((unsigned)h[3] << 16);
  *reinterpret_cast<uint2*>(p) = u;
}
template <> __device__ __forceinline__ void store4<__nv_bfloat16>(__nv_bfloat16* p, float a, float b, float c, float d) {
  store4_16(p, a, b, c, d);
}
template <> __device__ __forceinline__ void store4<__half>(__half* p, float a, float b, float c, float d) {
  store4_16(p, a, b, c, d);
}

__device__ __forceinline__ bool finite_f32(float v) { return isfinite(v); }

}  // namespace swarmshake
