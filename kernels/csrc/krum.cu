// Krum pairwise squared distances D[i][j] = sum_c (x[i][c] - x[j][c])^2, k <= 64.
//
// Direct differences (no Gram form, so no cancellation when peers are nearly
// equal). A CTA walks chunks of C coordinates (persistent grid-stride loop). The
// [k x C] tile of a chunk is copied global -> shared memory by cp.async (16-byte
// pieces, STAGES-deep ring, so several chunks are in flight while one is computed),
// rows k..8R-1 stay zero. Each warp owns one 8x8 block of pairs (I <= J); when the
// pair blocks are few (k <= 16), W warps share a pair block and split the chunk's
// 32-coordinate strips. Lane = coordinate; fp32 differences and accumulators in
// registers; diagonal blocks only compute i < j. At the end each warp reduces its
// accumulators over lanes in a fixed butterfly and writes its own partial; the host
// sums the partials in fp64 in a fixed order (deterministic run to run).
// The host pads d to a multiple of 8 elements (zeros add nothing) and aligns x to 16 bytes.
#include "common.cuh"

namespace swarmshake {

// C: coordinates per chunk (one stage is 8R x C elements, 16 KB in fp32);
// W: warps sharing a pair block; G: CTAs (grid.y) splitting the pair blocks.
template <int R, int BR = 8> struct KrumCfg {
  static constexpr int C = BR == 4 ? 1024 : (R == 1 ? 512 : (R == 2 ? 256 : (R <= 4 ? 128 : 64)));
  static constexpr int W = R == 1 ? 8 : (R == 2 ? 4 : 1);
  static constexpr int P = R * (R + 1) / 2;
  static constexpr int G = P > 32 ? 2 : 1;
  static constexpr int WARPS = ((P + G - 1) / G) * W;
  static constexpr int STAGES = 4;
  static constexpr int MIN_BLOCKS = (R == 3 || R == 4) ? 2 : 1;  // caps registers so two CTAs fit an SM
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// BR: rows on each side of a pair block (8; 4 when k <= 4, so k = 3 or 4 does not
// compute 28 pairs of mostly padding rows).
template <typename T, int R, int BR>
__global__ void __launch_bounds__(KrumCfg<R, BR>::WARPS * 32, KrumCfg<R, BR>::MIN_BLOCKS)
    krum_kernel(const T* __restrict__ x, float* __restrict__ partial, int k, int64_t d, int64_t nchunks) {
  using Cfg = KrumCfg<R, BR>;
  constexpr int C = Cfg::C, W = Cfg::W, S = Cfg::STAGES;
  constexpr int ROWS = BR * R;
  constexpr int NT = Cfg::WARPS * 32;
  constexpr int EPP = 16 / sizeof(T);     // elements per 16-byte piece
  constexpr int PPR = C / EPP;            // pieces per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* tile = reinterpret_cast<T*>(smem_raw);  // [S][ROWS][C]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int WPG = Cfg::WARPS / W;  // warps per strip group = pair blocks handled by this CTA
  const int sg = W == 1 ? 0 : warp / WPG;
  const int pb = blockIdx.y * WPG + warp % WPG;
  int I = R, J = R;
  {
    int p = pb;
#pragma unroll 1
    for (int a = 0; a < R; ++a) {
      const int cnt = R - a;
      if (p < cnt) { I = a; J = a + p; break; }
      p -= cnt;
    }
  }
  const bool active = I < R;
  const bool diag = (R == 1) || I == J;

  // zero the padding rows of every stage once (cp.async never writes them)
  for (int e = threadIdx.x; e < S * ROWS * C; e += NT) {
    const int row = (e / C) % ROWS;
    if (row >= k) tile[e] = from_f32<T>(0.f);
  }

  float acc[BR][BR];
#pragma unroll
  for (int a = 0; a < BR; ++a)
#pragma unroll
    for (int b = 0; b < BR; ++b) acc[a][b] = 0.f;

  const int npieces = k * PPR;
  auto issue = [&](int64_t ch, int st) {
    if (ch < nchunks) {
      const int64_t c0 = ch * C;
      T* dst = tile + (size_t)st * ROWS * C;
      for (int e = threadIdx.x; e < npieces; e += NT) {
        const int row = e / PPR, pc = e % PPR;
        const int64_t c = c0 + (int64_t)pc * EPP;
        const bool valid = c < d;
        cp_async16(dst + row * C + pc * EPP, x + (valid ? (int64_t)row * d + c : 0), valid);
      }
    }
    cp_async_commit();  // an empty group keeps the counting uniform
  };

  int64_t ch = blockIdx.x;
#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(ch + (int64_t)s * gridDim.x, s);
  int st = 0;
  for (; ch < nchunks; ch += gridDim.x) {
    cp_async_wait<S - 2>();
    __syncthreads();  // chunk ch visible to all; stage (st - 1) free for reuse
    issue(ch + (int64_t)(S - 1) * gridDim.x, (st + S - 1) % S);
    if (active) {
      const T* tl = tile + (size_t)st * ROWS * C;
#pragma unroll 4
      for (int s = sg; s < C / 32; s += W) {
        const int col = s * 32 + lane;
        float a[BR], b[BR];
#pragma unroll
        for (int q = 0; q < BR; ++q) a[q] = to_f32<T>(tl[(I * BR + q) * C + col]);
        if (diag) {
#pragma unroll
          for (int p = 0; p < BR; ++p)
#pragma unroll
            for (int q = 0; q < BR; ++q)
              if (p < q) {
                const float t = __fsub_rn(a[p], a[q]);
                acc[p][q] = __fmaf_rn(t, t, acc[p][q]);
              }
        } else {
#pragma unroll
          for (int q = 0; q < BR; ++q) b[q] = to_f32<T>(tl[(J * BR + q) * C + col]);
#pragma unroll
          for (int p = 0; p < BR; ++p)
#pragma unroll
            for (int q = 0; q < BR; ++q) {
              const float t = __fsub_rn(a[p], b[q]);
              acc[p][q] = __fmaf_rn(t, t, acc[p][q]);
            }
        }
      }
    }
    st = (st + 1) % S;
  }
  cp_async_wait<0>();
  if (!active) return;
#pragma unroll
  for (int p = 0; p < BR; ++p)
#pragma unroll
    for (int q = 0; q < BR; ++q) {
      float v = acc[p][q];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[p][q] = v;
    }
  if (lane == 0) {
    float* P = partial + ((int64_t)blockIdx.x * W + sg) * ROWS * ROWS;
#pragma unroll
    for (int p = 0; p < BR; ++p)
#pragma unroll
      for (int q = 0; q < BR; ++q)
        if (!diag || p < q) P[(I * BR + p) * ROWS + (J * BR + q)] = acc[p][q];
  }
}

template <typename T, int R, int BR>
void launch_krum_r(const T* x, float* partial, int k, int64_t d, int grid, cudaStream_t stream) {
  using Cfg = KrumCfg<R, BR>;
  const int64_t nchunks = (d + Cfg::C - 1) / Cfg::C;
  const size_t smem = (size_t)Cfg::STAGES * BR * R * Cfg::C * sizeof(T);
  cudaFuncSetAttribute(krum_kernel<T, R, BR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);  // per device
  dim3 g(grid, Cfg::G);
  krum_kernel<T, R, BR><<<g, Cfg::WARPS * 32, smem, stream>>>(x, partial, k, d, nchunks);
}

template <typename T, int R, int BR>
int krum_cap_r() {
  using Cfg = KrumCfg<R, BR>;
  const size_t smem = (size_t)Cfg::STAGES * BR * R * Cfg::C * sizeof(T);
  cudaFuncSetAttribute(krum_kernel<T, R, BR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  int per_sm = 0, dev = 0, sms = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, krum_kernel<T, R, BR>, Cfg::WARPS * 32, smem);
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return (per_sm > 0 ? per_sm : 1) * sms;
}

#define SW_KRUM_SWITCH(CALL)                            \
  if (k <= 4) return CALL(4, 1);                        \
  switch ((k + 7) / 8) {                                \
    case 1: return CALL(8, 1);                          \
    case 2: return CALL(8, 2);                          \
    case 3: return CALL(8, 3);                          \
    case 4: return CALL(8, 4);                          \
    case 5: return CALL(8, 5);                          \
    case 6: return CALL(8, 6);                          \
    case 7: return CALL(8, 7);                          \
    default: return CALL(8, 8);                         \
  }

template <typename T>
int krum_cap(int k) {
#define SW_CAP(BR, R) krum_cap_r<T, R, BR>()
  SW_KRUM_SWITCH(SW_CAP)
#undef SW_CAP
}

template <typename T>
void launch_krum(const void* x, float* partial, int k, int64_t d, int grid, cudaStream_t stream) {
  const T* xp = (const T*)x;
#define SW_LK(BR, R) launch_krum_r<T, R, BR>(xp, partial, k, d, grid, stream)
  SW_KRUM_SWITCH(SW_LK)
#undef SW_LK
}

template <int BR, int R>
int krum_cfg_c() { return KrumCfg<R, BR>::C; }
template <int BR, int R>
int krum_cfg_w() { return KrumCfg<R, BR>::W; }
template <int BR, int R>
int krum_cfg_rows() { return BR * R; }

}  // namespace swarmshake

// chunk size C, warps per pair block W, padded rows and resident CTAs of the kernel
// for k (the host sizes the grid and the partials from them)
void krum_config(int k, int dtype, int* C, int* W, int* rows, int* resident) {
  using namespace swarmshake;
  *resident = dtype == 0 ? krum_cap<float>(k) : (dtype == 1 ? krum_cap<__nv_bfloat16>(k) : krum_cap<__half>(k));
  auto c = [k]() -> int {
#define SW_C(BR, R) krum_cfg_c<BR, R>()
    SW_KRUM_SWITCH(SW_C)
#undef SW_C
  };
  auto w = [k]() -> int {
#define SW_W(BR, R) krum_cfg_w<BR, R>()
    SW_KRUM_SWITCH(SW_W)
#undef SW_W
  };
  auto r = [k]() -> int {
#define SW_R(BR, R) krum_cfg_rows<BR, R>()
    SW_KRUM_SWITCH(SW_R)
#undef SW_R
  };
  *C = c();
  *W = w();
  *rows = r();
}

void launch_krum_any(const void* x, float* partial, int k, int64_t d, int grid, int dtype, cudaStream_t stream) {
  if (dtype == 0) swarmshake::launch_krum<float>(x, partial, k, d, grid, stream);
  else if (dtype == 1) swarmshake::launch_krum<__nv_bfloat16>(x, partial, k, d, grid, stream);
  else swarmshake::launch_krum<__half>(x, partial, k, d, grid, stream);
}
