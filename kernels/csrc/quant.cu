// Int8 block quantization and dequantization, see kernels/quant.py for the
// definition. Quantize: one warp per block of B elements, each lane holds PER =
// ceil(B / 32) values in registers (B <= 1024; larger blocks re-read through L1),
// warp max of |x| and a warp vote on non-finite values, then q = rint(x / scale)
// with one IEEE division, exactly as the torch reference.
#include "common.cuh"

namespace swarmshake {

template <typename T, int PER>
__global__ void __launch_bounds__(256) quant_kernel(const T* __restrict__ x, int8_t* __restrict__ q,
                                                    float* __restrict__ scales, int64_t n, int B, int64_t nb) {
  const int lane = threadIdx.x & 31;
  const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t b = wid; b < nb; b += nw) {
    const int64_t s0 = b * B;
    const int len = (int)min((int64_t)B, n - s0);
    float v[PER];
    float amax = 0.f;
    bool bad = false;
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const int i = lane + 32 * p;
      v[p] = i < len ? to_f32<T>(ldg<T>(x + s0 + i)) : 0.f;
      bad |= !isfinite(v[p]);
      amax = fmaxf(amax, fabsf(v[p]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    bad = __any_sync(0xffffffffu, bad);
    const float scale = __fdiv_rn(amax, 127.0f);
    const bool ok = !bad && scale != 0.f;
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const int i = lane + 32 * p;
      if (i < len) {
        int qi = 0;
        if (ok) {
          float r = rintf(__fdiv_rn(v[p], scale));
          r = fminf(fmaxf(r, -127.f), 127.f);
          qi = (int)r;
        }
        q[s0 + i] = (int8_t)qi;
      }
    }
    if (lane == 0) scales[b] = bad ? __int_as_float(0x7fc00000) : scale;
  }
}

// B % 4 == 0, B <= 1024, x 16-byte aligned (fp32) / 8-byte (16-bit): each lane loads 4
// consecutive values at once and stores its 4 int8 as one 4-byte word.
template <typename T, int PER4>
__global__ void __launch_bounds__(256) quant_kernel_vec(const T* __restrict__ x, int8_t* __restrict__ q,
                                                        float* __restrict__ scales, int64_t n, int B, int64_t nb) {
  const int lane = threadIdx.x & 31;
  const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t b = wid; b < nb; b += nw) {
    const int64_t s0 = b * B;
    const int len = (int)min((int64_t)B, n - s0);
    float v[PER4][4];
    float amax = 0.f;
    bool bad = false;
#pragma unroll
    for (int p = 0; p < PER4; ++p) {
      const int i = 4 * (lane + 32 * p);
      if (i + 4 <= len) {
        load4<T>(x + s0 + i, v[p]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[p][e] = (i + e < len) ? to_f32<T>(ldg<T>(x + s0 + i + e)) : 0.f;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        bad |= !isfinite(v[p][e]);
        amax = fmaxf(amax, fabsf(v[p][e]));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    bad = __any_sync(0xffffffffu, bad);
    const float scale = __fdiv_rn(amax, 127.0f);
    const bool ok = !bad && scale != 0.f;
#pragma unroll
    for (int p = 0; p < PER4; ++p) {
      const int i = 4 * (lane + 32 * p);
      int8_t qq[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int qi = 0;
        if (ok) {
          float r = rintf(__fdiv_rn(v[p][e], scale));
          r = fminf(fmaxf(r, -127.f), 127.f);
          qi = (int)r;
        }
        qq[e] = (int8_t)qi;
      }
      if (i + 4 <= len) {
        char4 c;
        c.x = qq[0]; c.y = qq[1]; c.z = qq[2]; c.w = qq[3];
        *reinterpret_cast<char4*>(q + s0 + i) = c;
      } else {
        for (int e = 0; e < 4 && i + e < len; ++e) q[s0 + i + e] = qq[e];
      }
    }
    if (lane == 0) scales[b] = bad ? __int_as_float(0x7fc00000) : scale;
  }
}

// B > 1024: two passes, the second one re-reading the block.
template <typename T>
__global__ void __launch_bounds__(256) quant_kernel_big(const T* __restrict__ x, int8_t* __restrict__ q,
                                                        float* __restrict__ scales, int64_t n, int B, int64_t nb) {
  const int lane = threadIdx.x & 31;
  const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t b = wid; b < nb; b += nw) {
    const int64_t s0 = b * B;
    const int len = (int)min((int64_t)B, n - s0);
    float amax = 0.f;
    bool bad = false;
    for (int i = lane; i < len; i += 32) {
      const float f = to_f32<T>(ldg<T>(x + s0 + i));
      bad |= !isfinite(f);
      amax = fmaxf(amax, fabsf(f));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    bad = __any_sync(0xffffffffu, bad);
    const float scale = __fdiv_rn(amax, 127.0f);
    const bool ok = !bad && scale != 0.f;
    for (int i = lane; i < len; i += 32) {
      int qi = 0;
      if (ok) {
        float r = rintf(__fdiv_rn(to_f32<T>(ldg<T>(x + s0 + i)), scale));
        r = fminf(fmaxf(r, -127.f), 127.f);
        qi = (int)r;
      }
      q[s0 + i] = (int8_t)qi;
    }
    if (lane == 0) scales[b] = bad ? __int_as_float(0x7fc00000) : scale;
  }
}

// Dequantize: one warp per block (its scale read once); with B % 4 == 0 each lane
// turns 4 consecutive int8 (one 4-byte load) into 4 outputs (one vector store).
template <typename T, bool VEC>
__global__ void __launch_bounds__(256) dequant_kernel(const int8_t* __restrict__ q, const float* __restrict__ scales,
                                                      T* __restrict__ out, int64_t n, int B, int64_t nb) {
  const int lane = threadIdx.x & 31;
  const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t b = wid; b < nb; b += nw) {
    const int64_t s0 = b * B;
    const int len = (int)min((int64_t)B, n - s0);
    const float sc = __ldg(scales + b);
    if (VEC) {
      for (int i = lane * 4; i < len; i += 128) {
        if (i + 4 <= len) {
          const char4 c = __ldcs(reinterpret_cast<const char4*>(q + s0 + i));
          const float f0 = __fmul_rn((float)c.x, sc), f1 = __fmul_rn((float)c.y, sc);
          const float f2 = __fmul_rn((float)c.z, sc), f3 = __fmul_rn((float)c.w, sc);
          store4<T>(out + s0 + i, f0, f1, f2, f3);
        } else {
          for (int e = i; e < len; ++e) out[s0 + e] = from_f32<T>(__fmul_rn((float)q[s0 + e], sc));
        }
      }
    } else {
      for (int i = lane; i < len; i += 32) out[s0 + i] = from_f32<T>(__fmul_rn((float)q[s0 + i], sc));
    }
  }
}

template <typename T>
void launch_quant_t(const void* x, int8_t* q, float* scales, int64_t n, int B, int sms, cudaStream_t stream) {
  const int64_t nb = (n + B - 1) / B;
  int64_t blocks = (nb + 7) / 8;
  const int64_t cap = (int64_t)sms * 64;
  if (blocks > cap) blocks = cap;
  const T* xp = (const T*)x;
  const bool vec = (B % 4 == 0) && (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T)) == 0) &&
                   (reinterpret_cast<uintptr_t>(q) % 4 == 0);
#define SW_QV(P4) quant_kernel_vec<T, P4><<<(unsigned)blocks, 256, 0, stream>>>(xp, q, scales, n, B, nb)
#define SW_Q(PER) quant_kernel<T, PER><<<(unsigned)blocks, 256, 0, stream>>>(xp, q, scales, n, B, nb)
  if (vec && B <= 128) SW_QV(1);
  else if (vec && B <= 256) SW_QV(2);
  else if (vec && B <= 512) SW_QV(4);
  else if (vec && B <= 1024) SW_QV(8);
  else if (B <= 32) SW_Q(1);
  else if (B <= 64) SW_Q(2);
  else if (B <= 128) SW_Q(4);
  else if (B <= 256) SW_Q(8);
  else if (B <= 512) SW_Q(16);
  else if (B <= 1024) SW_Q(32);
  else quant_kernel_big<T><<<(unsigned)blocks, 256, 0, stream>>>(xp, q, scales, n, B, nb);
#undef SW_Q
#undef SW_QV
}

template <typename T>
void launch_dequant_t(const int8_t* q, const float* scales, void* out, int64_t n, int B, int sms, cudaStream_t stream) {
  const int64_t nb = (n + B - 1) / B;
  int64_t blocks = (nb + 7) / 8;
  const int64_t cap = (int64_t)sms * 64;
  if (blocks > cap) blocks = cap;
  const bool vec = (B % 4 == 0) && (reinterpret_cast<uintptr_t>(q) % 4 == 0) &&
                   (reinterpret_cast<uintptr_t>(out) % (4 * sizeof(T)) == 0);
  if (vec) dequant_kernel<T, true><<<(unsigned)blocks, 256, 0, stream>>>(q, scales, (T*)out, n, B, nb);
  else dequant_kernel<T, false><<<(unsigned)blocks, 256, 0, stream>>>(q, scales, (T*)out, n, B, nb);
}

}  // namespace swarmshake

void launch_quant(const void* x, int8_t* q, float* scales, int64_t n, int B, int dtype, int sms, cudaStream_t stream) {
  if (dtype == 0) swarmshake::launch_quant_t<float>(x, q, scales, n, B, sms, stream);
  else if (dtype == 1) swarmshake::launch_quant_t<__nv_bfloat16>(x, q, scales, n, B, sms, stream);
  else swarmshake::launch_quant_t<__half>(x, q, scales, n, B, sms, stream);
}

void launch_dequant(const int8_t* q, const float* scales, void* out, int64_t n, int B, int dtype, int sms,
                    cudaStream_t stream) {
  if (dtype == 0) swarmshake::launch_dequant_t<float>(q, scales, out, n, B, sms, stream);
  else if (dtype == 1) swarmshake::launch_dequant_t<__nv_bfloat16>(q, scales, out, n, B, sms, stream);
  else swarmshake::launch_dequant_t<__half>(q, scales, out, n, B, sms, stream);
}
