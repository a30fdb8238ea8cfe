// float32 weights x float32 activations for a few rows (batch-1 decoding): y = x W^T, W (N, K) as nn.Linear keeps
// it. Bandwidth-bound: each weight is read once from memory for all of x's rows (at most 4 at a time), one row of
// W at a time, prefetched 2 KB ahead (one stream a thread, the rows of W split between the threads: 45 GB/s over
// SmolLM2's matrices where oneDNN's packed layout read at 37.5 and 4 rows of W side by side at 41-44,
// docs/decoding.md). Compiled -march=native: AVX512, else AVX2 + FMA, else plain C++.
#include "quant.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#if defined(__x86_64__) || defined(__i386__)  // x86 alone has them: elsewhere the plain C++ paths
#include <immintrin.h>
#endif
#include <algorithm>

namespace aiayn_kernels {
namespace {

constexpr int64_t AHEAD = 512;  // floats of the weights prefetched ahead of the loads
constexpr int64_t CHUNK = 4;  // rows of x a pass over the weights (8 measured no faster: x's loads bound it)

// out[r * n] = x[r] . w for r < R: one row w (K) of the weight, R rows of x (K each, xs apart).
template <int R>
void dot(const float* w, int64_t k, const float* x, int64_t xs, float* out, int64_t n) {
  float sums[R] = {};
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (; i + 32 <= k; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(w + i + AHEAD), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + i + AHEAD + 16), _MM_HINT_T0);
    const __m512 v0 = _mm512_loadu_ps(w + i), v1 = _mm512_loadu_ps(w + i + 16);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(x + r * xs + i), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(x + r * xs + i + 16), acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) sums[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (; i + 16 <= k; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(w + i + AHEAD), _MM_HINT_T0);
    const __m256 v0 = _mm256_loadu_ps(w + i), v1 = _mm256_loadu_ps(w + i + 8);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_fmadd_ps(v0, _mm256_loadu_ps(x + r * xs + i), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(v1, _mm256_loadu_ps(x + r * xs + i + 8), acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float a[8];
    _mm256_store_ps(a, _mm256_add_ps(acc[r][0], acc[r][1]));
    sums[r] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
  }
#endif
  for (; i < k; ++i)  // what the vectors left (all of it in plain C++)
    for (int r = 0; r < R; ++r) sums[r] += w[i] * x[r * xs + i];
  for (int r = 0; r < R; ++r) out[r * n] = sums[r];
}

}  // namespace

at::Tensor f32_mm(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "f32_mm: x must be (M, K) float32");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.size(1) == x.size(1),
              "f32_mm: weight must be (N, K) float32, K as x's");
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  at::Tensor y = at::empty({m, n}, x.options());
  const float *w = wc.data_ptr<float>(), *xp = xc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  at::parallel_for(0, n, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j)
      for (int64_t i = 0; i < m; i += CHUNK) {
        const float *row = w + j * k, *xi = xp + i * k;
        float* o = out + i * n + j;
        switch (std::min<int64_t>(CHUNK, m - i)) {
          case 1: dot<1>(row, k, xi, k, o, n); break;
          case 2: dot<2>(row, k, xi, k, o, n); break;
          case 3: dot<3>(row, k, xi, k, o, n); break;
          default: dot<4>(row, k, xi, k, o, n); break;
        }
      }
  });
  return y;
}

}  // namespace aiayn_kernels
