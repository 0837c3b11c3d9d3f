// Fingerprint sum H = sum_i M[i / 4096] * T[i % 4096] * w[i]  (mod 2^64), see
// kernels/fingerprint.py for the definition. w[i] are the little-endian int32 words
// of the tensor's bytes, sign-extended. A CTA of 256 threads walks 4096-word blocks
// (grid-stride); thread t owns words 4t + 1024r + e (r, e < 4) of every block and
// reads them as four 16-byte loads per block.
// The modular sum is order-independent, so the CTA partials are added with atomics.
#include "common.cuh"

namespace swarmshake {

constexpr uint64_t FP_GOLDEN = 0x9E3779B97F4A7C15ull;
constexpr uint64_t FP_SEED_T = 0x243F6A8885A308D3ull;
constexpr uint64_t FP_SEED_M = 0x13198A2E03707344ull;

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

// Keys T[0..4095] live in shared memory (32 KB, computed once per CTA). Thread t owns
// words 4t + 1024r + e (r, e < 4) of each block; a loop trip handles UNROLL blocks so
// that 4 * UNROLL 16-byte loads are in flight per thread.
constexpr int FP_UNROLL = 4;

__global__ void __launch_bounds__(256) fingerprint_kernel(const int32_t* __restrict__ w, int64_t n,
                                                          unsigned long long* __restrict__ out) {
  __shared__ uint64_t keys[4096];
  __shared__ uint64_t red[8];
  const int t = threadIdx.x;
  for (int j = t; j < 4096; j += 256) keys[j] = splitmix64(FP_SEED_T + (uint64_t)(j + 1) * FP_GOLDEN) | 1ull;
  __syncthreads();
  const int64_t nblocks = (n + 4095) / 4096;
  const int64_t nfull = n / 4096;
  uint64_t acc = 0;
  int64_t b = blockIdx.x;
  // full blocks, FP_UNROLL at a time
  for (; b + (int64_t)(FP_UNROLL - 1) * gridDim.x < nfull; b += (int64_t)FP_UNROLL * gridDim.x) {
    int4 v[FP_UNROLL][4];
#pragma unroll
    for (int u = 0; u < FP_UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        v[u][r] = __ldcs(reinterpret_cast<const int4*>(w + (b + (int64_t)u * gridDim.x) * 4096 + 4 * t + 1024 * r));
#pragma unroll
    for (int u = 0; u < FP_UNROLL; ++u) {
      uint64_t inner = 0;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const ulonglong2 k01 = *reinterpret_cast<const ulonglong2*>(&keys[4 * t + 1024 * r]);
        const ulonglong2 k23 = *reinterpret_cast<const ulonglong2*>(&keys[4 * t + 1024 * r + 2]);
        inner += (uint64_t)(int64_t)v[u][r].x * k01.x + (uint64_t)(int64_t)v[u][r].y * k01.y +
                 (uint64_t)(int64_t)v[u][r].z * k23.x + (uint64_t)(int64_t)v[u][r].w * k23.y;
      }
      const uint64_t bb = (uint64_t)(b + (int64_t)u * gridDim.x);
      acc += (splitmix64(FP_SEED_M + (bb + 1) * FP_GOLDEN) | 1ull) * inner;
    }
  }
  // the rest, one block at a time (the last one may be partial)
  for (; b < nblocks; b += gridDim.x) {
    const int32_t* blk = w + b * 4096;
    const int64_t rem = n - b * 4096;
    uint64_t inner = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = 4 * t + 1024 * r + e;
        const int32_t x = j < rem ? blk[j] : 0;
        inner += (uint64_t)(int64_t)x * keys[j];
      }
    acc += (splitmix64(FP_SEED_M + (uint64_t)(b + 1) * FP_GOLDEN) | 1ull) * inner;
  }
  // CTA reduction (mod 2^64; any order gives the same bits)
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((t & 31) == 0) red[t >> 5] = acc;
  __syncthreads();
  if (t == 0) {
    uint64_t s = 0;
    for (int i = 0; i < 8; ++i) s += red[i];
    atomicAdd(out, (unsigned long long)s);
  }
}

}  // namespace swarmshake

void launch_fingerprint(const int32_t* w, int64_t n, unsigned long long* out, int grid, cudaStream_t stream) {
  const int64_t nblocks = (n + 4095) / 4096;
  if (nblocks == 0) return;
  if (grid > nblocks) grid = (int)nblocks;
  swarmshake::fingerprint_kernel<<<grid, 256, 0, stream>>>(w, n, out);
}
