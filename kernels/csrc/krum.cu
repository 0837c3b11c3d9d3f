// Krum pairwise squared distances D[i][j] = sum_c (x[i][c] - x[j][c])^2, k <= 64.
//
// Direct differences (no Gram form, so no cancellation when peers are nearly
// equal). A CTA walks chunks of C coordinates (persistent grid-stride loop), stages
// the [8R x C] tile in shared memory as fp32 (double buffered: the next chunk is
// loaded into registers while the current one is computed), and each warp owns one
// 8x8 block of pairs (I <= J), lane = coordinate, 64 fp32 accumulators per thread.
// Diagonal blocks only compute i < j. At the end each warp reduces its accumulators
// over lanes in a fixed butterfly and writes this CTA's partial; the host sums the
// partials in fp64 in a fixed order (deterministic).
#include "common.cuh"

namespace swarmshake {

// coordinates per chunk, and warps sharing one pair block (each takes every W-th strip)
template <int R> struct KrumC { static constexpr int value = R == 1 ? 256 : (R <= 4 ? 128 : 64); };
template <int R> struct KrumW { static constexpr int value = R == 1 ? 8 : (R == 2 ? 4 : 1); };

template <typename T, int R, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) krum_kernel(const T* __restrict__ x, float* __restrict__ partial,
                                                          int k, int64_t d, int64_t nchunks) {
  constexpr int KRUM_C = KrumC<R>::value;
  constexpr int ROWS = 8 * R;
  constexpr int NT = WARPS * 32;
  constexpr int TILE = ROWS * KRUM_C;
  constexpr int PER = (TILE + NT - 1) / NT;  // tile elements each thread stages
  __shared__ float tile[2][ROWS][KRUM_C];

  constexpr int W = KrumW<R>::value;
  constexpr int PB = R * (R + 1) / 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sg = warp / PB;  // strip group (W > 1 only when all pair blocks fit one CTA)
  // pair block of this warp: enumerate (I, J), I <= J < R, row-major
  const int pb = blockIdx.y * (WARPS / W) + warp % (WARPS / W);
  int I = 0, J = 0;
  {
    int p = pb;
    for (int a = 0; a < R; ++a) {
      const int cnt = R - a;
      if (p < cnt) { I = a; J = a + p; break; }
      p -= cnt;
      I = R;  // past the end: idle warp
    }
  }
  const bool active = I < R;
  const bool diag = I == J;

  float acc[8][8];
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int b = 0; b < 8; ++b) acc[a][b] = 0.f;

  float stage[PER];
  auto load_chunk = [&](int64_t ch) {
    const int64_t c0 = ch * KRUM_C;
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      const int e = threadIdx.x + r * NT;
      const int row = e / KRUM_C, col = e % KRUM_C;
      const int64_t c = c0 + col;
      float v = 0.f;
      if (e < TILE && row < k && c < d) v = to_f32<T>(ldg<T>(x + (int64_t)row * d + c));
      stage[r] = v;
    }
  };
  auto store_chunk = [&](int buf) {
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      const int e = threadIdx.x + r * NT;
      if (e < TILE) tile[buf][e / KRUM_C][e % KRUM_C] = stage[r];
    }
  };

  int64_t ch = blockIdx.x;
  int buf = 0;
  if (ch < nchunks) {
    load_chunk(ch);
    store_chunk(0);
  }
  __syncthreads();
  for (; ch < nchunks; ch += gridDim.x) {
    const int64_t next = ch + gridDim.x;
    if (next < nchunks) load_chunk(next);
    if (active) {
#pragma unroll
      for (int s = sg; s < KRUM_C / 32; s += W) {
        const int col = s * 32 + lane;
        float a[8], b[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          a[q] = tile[buf][I * 8 + q][col];
          b[q] = tile[buf][J * 8 + q][col];
        }
        if (diag) {
#pragma unroll
          for (int p = 0; p < 8; ++p)
#pragma unroll
            for (int q = 0; q < 8; ++q)
              if (p < q) {
                const float t = __fsub_rn(a[p], b[q]);
                acc[p][q] = __fmaf_rn(t, t, acc[p][q]);
              }
        } else {
#pragma unroll
          for (int p = 0; p < 8; ++p)
#pragma unroll
            for (int q = 0; q < 8; ++q) {
              const float t = __fsub_rn(a[p], b[q]);
              acc[p][q] = __fmaf_rn(t, t, acc[p][q]);
            }
        }
      }
    }
    if (next < nchunks) store_chunk(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }
  if (!active) return;
  // fixed-order butterfly over lanes, then lane 0 writes this CTA's partial block
#pragma unroll
  for (int p = 0; p < 8; ++p)
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      float v = acc[p][q];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[p][q] = v;
    }
  if (lane == 0) {
    float* P = partial + ((int64_t)blockIdx.x * W + sg) * ROWS * ROWS;
#pragma unroll
    for (int p = 0; p < 8; ++p)
#pragma unroll
      for (int q = 0; q < 8; ++q)
        if (!diag || p < q) P[(I * 8 + p) * ROWS + (J * 8 + q)] = acc[p][q];
  }
}

template <typename T, int R>
int launch_krum_r(const T* x, float* partial, int k, int64_t d, int grid, cudaStream_t stream) {
  constexpr int P = R * (R + 1) / 2;
  constexpr int G = P > 32 ? 2 : 1;
  constexpr int WARPS = ((P + G - 1) / G) * KrumW<R>::value;
  constexpr int C = KrumC<R>::value;
  const int64_t nchunks = (d + C - 1) / C;
  if (grid > nchunks) grid = (int)nchunks;
  dim3 g(grid, G);
  krum_kernel<T, R, WARPS><<<g, WARPS * 32, 0, stream>>>(x, partial, k, d, nchunks);
  return 8 * R;
}

template <typename T>
void launch_krum(const void* x, float* partial, int k, int64_t d, int grid, cudaStream_t stream) {
  const T* xp = (const T*)x;
  switch ((k + 7) / 8) {
    case 1: launch_krum_r<T, 1>(xp, partial, k, d, grid, stream); break;
    case 2: launch_krum_r<T, 2>(xp, partial, k, d, grid, stream); break;
    case 3: launch_krum_r<T, 3>(xp, partial, k, d, grid, stream); break;
    case 4: launch_krum_r<T, 4>(xp, partial, k, d, grid, stream); break;
    case 5: launch_krum_r<T, 5>(xp, partial, k, d, grid, stream); break;
    case 6: launch_krum_r<T, 6>(xp, partial, k, d, grid, stream); break;
    case 7: launch_krum_r<T, 7>(xp, partial, k, d, grid, stream); break;
    default: launch_krum_r<T, 8>(xp, partial, k, d, grid, stream); break;
  }
}

}  // namespace swarmshake

void launch_krum_any(const void* x, float* partial, int k, int64_t d, int grid, int dtype, cudaStream_t stream) {
  if (dtype == 0) swarmshake::launch_krum<float>(x, partial, k, d, grid, stream);
  else if (dtype == 1) swarmshake::launch_krum<__nv_bfloat16>(x, partial, k, d, grid, stream);
  else swarmshake::launch_krum<__half>(x, partial, k, d, grid, stream);
}
