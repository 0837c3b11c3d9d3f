// Host side of the swarmshake CUDA kernels: argument checks, allocation, launch.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

void launch_robust_f32(const void*, void*, int, int64_t, int, int, cudaStream_t);
void launch_robust_bf16(const void*, void*, int, int64_t, int, int, cudaStream_t);
void launch_robust_f16(const void*, void*, int, int64_t, int, int, cudaStream_t);
void launch_krum_any(const void*, float*, int, int64_t, int, int, cudaStream_t);
void krum_config(int k, int dtype, int* C, int* W, int* rows, int* resident);
void launch_fingerprint(const int32_t*, int64_t, unsigned long long*, int, cudaStream_t);
void launch_quant(const void*, int8_t*, float*, int64_t, int, int, int, cudaStream_t);
void launch_dequant(const int8_t*, const float*, void*, int64_t, int, int, int, cudaStream_t);

static int dtype_code(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return 0;
  if (t.scalar_type() == at::kBFloat16) return 1;
  if (t.scalar_type() == at::kHalf) return 2;
  TORCH_CHECK(false, "swarmshake kernels take float32, bfloat16 or float16, got ", t.scalar_type());
}

static at::ScalarType code_dtype(int c) {
  return c == 0 ? at::kFloat : (c == 1 ? at::kBFloat16 : at::kHalf);
}

static int sm_count(const at::Tensor& t) {
  return at::cuda::getDeviceProperties(t.get_device())->multiProcessorCount;
}

at::Tensor robust_reduce(const at::Tensor& x, int64_t op, int64_t trim) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "robust_reduce: x must be a contiguous CUDA [k, d]");
  const int k = (int)x.size(0);
  TORCH_CHECK(k >= 1 && k <= 64, "robust_reduce: 1 <= k <= 64, got ", k);
  const int64_t d = x.size(1);
  c10::cuda::CUDAGuard guard(x.device());
  auto out = at::empty({d}, x.options());
  if (d == 0) return out;
  auto stream = at::cuda::getCurrentCUDAStream();
  const int c = dtype_code(x);
  if (c == 0) launch_robust_f32(x.data_ptr(), out.data_ptr(), k, d, (int)op, (int)trim, stream);
  else if (c == 1) launch_robust_bf16(x.data_ptr(), out.data_ptr(), k, d, (int)op, (int)trim, stream);
  else launch_robust_f16(x.data_ptr(), out.data_ptr(), k, d, (int)op, (int)trim, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor krum_distances(const at::Tensor& x_in) {
  TORCH_CHECK(x_in.is_cuda() && x_in.dim() == 2 && x_in.is_contiguous(),
              "krum_distances: x must be a contiguous CUDA [k, d]");
  const int k = (int)x_in.size(0);
  TORCH_CHECK(k >= 1 && k <= 64, "krum_distances: 1 <= k <= 64, got ", k);
  c10::cuda::CUDAGuard guard(x_in.device());
  // 16-byte pieces need d % 8 == 0 and an aligned base: pad with zeros (adds nothing)
  at::Tensor x = x_in;
  const int64_t pad = (8 - x_in.size(1) % 8) % 8;
  if (pad || reinterpret_cast<uintptr_t>(x_in.data_ptr()) % 16) x = at::constant_pad_nd(x_in, {0, pad});
  const int64_t d = x.size(1);
  int C = 0, W = 0, rows = 0, resident = 0;
  krum_config(k, dtype_code(x), &C, &W, &rows, &resident);
  const int64_t nchunks = (d + C - 1) / C;
  // four waves of resident CTAs: long enough runs per CTA to hide the pipeline's fill,
  // short enough fp32 sums per thread (at most ~1000 terms at d = 32M, k = 32)
  const int grid = (int)std::max<int64_t>(1, std::min<int64_t>(nchunks, 4 * (int64_t)resident));
  auto partial = at::zeros({(int64_t)grid * W, rows, rows}, x.options().dtype(at::kFloat));
  if (d > 0) {
    launch_krum_any(x.data_ptr(), partial.data_ptr<float>(), k, d, grid, dtype_code(x),
                    at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  auto D = partial.sum(0, false, at::kDouble).slice(0, 0, k).slice(1, 0, k).triu(1);
  D = D + D.t();
  // a non-finite peer (or an overflowing sum) is at distance +inf; the diagonal stays 0
  D = at::where(at::isfinite(D), D, at::full({}, INFINITY, D.options()));
  D.fill_diagonal_(0.0);
  return D;
}

void fingerprint_sum(const at::Tensor& bytes, at::Tensor& out, int64_t slot) {
  TORCH_CHECK(bytes.is_cuda() && bytes.scalar_type() == at::kByte && bytes.is_contiguous() && bytes.dim() == 1,
              "fingerprint_sum: bytes must be a contiguous CUDA uint8 vector");
  TORCH_CHECK(bytes.numel() % 4 == 0 && reinterpret_cast<uintptr_t>(bytes.data_ptr()) % 16 == 0,
              "fingerprint_sum: bytes must be 16-byte aligned and a multiple of 4 long");
  TORCH_CHECK(out.is_cuda() && out.scalar_type() == at::kLong && slot >= 0 && slot < out.numel(),
              "fingerprint_sum: out must be a CUDA int64 vector holding slot");
  c10::cuda::CUDAGuard guard(bytes.device());
  const int64_t n = bytes.numel() / 4;
  launch_fingerprint(reinterpret_cast<const int32_t*>(bytes.data_ptr()), n,
                     reinterpret_cast<unsigned long long*>(out.data_ptr<int64_t>() + slot), sm_count(bytes) * 6,
                     at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::vector<at::Tensor> quantize_int8(const at::Tensor& x, int64_t block) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 1, "quantize_int8: x must be a contiguous CUDA vector");
  TORCH_CHECK(block >= 1 && block <= (1 << 30), "quantize_int8: bad block ", block);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t n = x.numel();
  const int64_t nb = (n + block - 1) / block;
  auto q = at::empty({n}, x.options().dtype(at::kChar));
  auto s = at::empty({nb}, x.options().dtype(at::kFloat));
  if (n > 0) {
    launch_quant(x.data_ptr(), q.data_ptr<int8_t>(), s.data_ptr<float>(), n, (int)block, dtype_code(x), sm_count(x),
                 at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {q, s};
}

at::Tensor dequantize_int8(const at::Tensor& q, const at::Tensor& scales, int64_t numel, int64_t block, int64_t dt) {
  TORCH_CHECK(q.is_cuda() && q.is_contiguous() && q.scalar_type() == at::kChar, "dequantize_int8: q must be CUDA int8");
  TORCH_CHECK(scales.is_cuda() && scales.is_contiguous() && scales.scalar_type() == at::kFloat,
              "dequantize_int8: scales must be CUDA fp32 on q's device");
  TORCH_CHECK(block >= 1 && block <= (1 << 30) && numel <= q.numel(), "dequantize_int8: bad block or numel");
  c10::cuda::CUDAGuard guard(q.device());
  auto out = at::empty({numel}, q.options().dtype(code_dtype((int)dt)));
  if (numel > 0) {
    launch_dequant(q.data_ptr<int8_t>(), scales.data_ptr<float>(), out.data_ptr(), numel, (int)block, (int)dt,
                   sm_count(q), at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("robust_reduce", &robust_reduce, "coordinate median (op 0) / trimmed mean (op 1) over dim 0");
  m.def("krum_distances", &krum_distances, "pairwise squared L2 distances, fp64 [k, k]");
  m.def("fingerprint_sum", &fingerprint_sum, "adds the fingerprint sum of bytes into out[slot]");
  m.def("quantize_int8", &quantize_int8, "int8 block quantization");
  m.def("dequantize_int8", &dequantize_int8, "int8 block dequantization");
}
