// int4 or int8 weights x int8 activations (W4A8, W8A8), the matrix-vector products of batch-1 decoding, as
// llama.cpp's Q4_1 x Q8_1 and Q8_0 x Q8_0. Activations are quantized here per row and group of 32: p int8,
// dx = max|x| / 127. Weights (aiayn.kernels.quant), 4 rows at a time, each group g of 32 weights:
// - q4a8_mm: y[m, n] = sum_g d[n,g] dx[m,g] sum_j q[n,g,j] p[m,g,j] + mn[n,g] dx[m,g] sum_j p[m,g,j], q in [0, 15];
//   packed (N/4, G, 64) uint8, each row's 16 bytes, byte j holding weight j (low nibble) and j + 16 (high);
//   scales (N/4, G, 8) fp16: d of the 4 rows, then their mins.
// - q8a8_mm: y[m, n] = sum_g d[n,g] dx[m,g] sum_j q[n,g,j] p[m,g,j], q in [-127, 127]; packed (N/4, G, 128)
//   int8, each row's 32 bytes; scales (N/4, G, 4) fp16.
// Compiled on the machine that runs it (-march=native, aiayn/kernels/__init__.py): AVX512-VNNI, else AVX2, else
// plain C++. The same math in torch operations (aiayn.kernels.quant.reference_*), which the tests hold it to.
#include "quant.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#if defined(__x86_64__) || defined(__i386__)  // x86 alone has them: elsewhere the plain C++ paths
#include <immintrin.h>
#endif
#include <algorithm>
#include <cmath>
#include <vector>

namespace aiayn_kernels {
namespace {

constexpr int AHEAD = 2048;  // bytes of weights prefetched ahead of the loads (measured: 1.2-1.5x at 512 or none)

struct Rows {  // one activation row quantized: p (K) int8, dx and dx * sum(p) per group
  std::vector<int8_t> p;
  std::vector<float> dx, sx;
};

void quantize_row(const float* x, int64_t k, Rows& r) {
  const int64_t groups = k / GROUP;
  r.p.resize(k);
  r.dx.resize(groups);
  r.sx.resize(groups);
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * GROUP;
    float amax = 0.f;
    for (int j = 0; j < GROUP; ++j) amax = std::max(amax, std::fabs(xg[j]));
    const float d = amax / 127.f, inv = d > 0.f ? 1.f / d : 0.f;
    int sum = 0;
    for (int j = 0; j < GROUP; ++j) {
      const int q = static_cast<int>(std::nearbyint(xg[j] * inv));
      r.p[g * GROUP + j] = static_cast<int8_t>(q);
      sum += q;
    }
    r.dx[g] = d;
    r.sx[g] = d * static_cast<float>(sum);
  }
}

// Four output rows (one group of the packing) for R activation rows at once (each group's weights unpacked once
// for all R): out[r * n + 0..3].
template <int R>
void q4_rows(const uint8_t* w, const uint16_t* s, const Rows* x, int64_t groups, float* out, int64_t n) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__F16C__)
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512 acc[R];
  __m256 accm[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    _mm_prefetch(reinterpret_cast<const char*>(w + g * 64 + AHEAD), _MM_HINT_T0);
    const __m512i b = _mm512_loadu_si512(w + g * 64);
    const __m512i lo = _mm512_and_si512(b, low4), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
    const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + g * 8)));
    const __m512 d = _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(dm));
    for (int r = 0; r < R; ++r) {
      const int8_t* p = x[r].p.data() + g * GROUP;
      const __m512i xl = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m512i xh = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xl), hi, xh);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(x[r].dx[g])), acc[r]);
      accm[r] = _mm256_fmadd_ps(dm, _mm256_set1_ps(x[r].sx[g]), accm[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(64) float a[16], m[8];
    _mm512_store_ps(a, acc[r]);
    _mm256_store_ps(m, accm[r]);
    for (int j = 0; j < 4; ++j) out[r * n + j] = a[4 * j] + a[4 * j + 1] + a[4 * j + 2] + a[4 * j + 3] + m[4 + j];
  }
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i spread[2] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)};
  __m256 acc[R][2], accm[R];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = accm[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    _mm_prefetch(reinterpret_cast<const char*>(w + g * 64 + AHEAD), _MM_HINT_T0);
    const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + g * 8)));
    for (int half = 0; half < 2; ++half) {  // rows 0-1, then rows 2-3
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + g * 64 + half * 32));
      const __m256i lo = _mm256_and_si256(b, low4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
      const __m256 d = _mm256_permutevar8x32_ps(dm, spread[half]);
      for (int r = 0; r < R; ++r) {
        const int8_t* p = x[r].p.data() + g * GROUP;
        const __m256i xl = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        const __m256i xh = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
        // u4 x s8 pairs sum to at most 2 x 15 x 128 per 16-bit lane, twice: no saturation
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[r][half] = _mm256_fmadd_ps(dot, _mm256_mul_ps(d, _mm256_set1_ps(x[r].dx[g])), acc[r][half]);
      }
    }
    for (int r = 0; r < R; ++r) accm[r] = _mm256_fmadd_ps(dm, _mm256_set1_ps(x[r].sx[g]), accm[r]);
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float a[2][8], m[8];
    _mm256_store_ps(a[0], acc[r][0]);
    _mm256_store_ps(a[1], acc[r][1]);
    _mm256_store_ps(m, accm[r]);
    for (int j = 0; j < 4; ++j) {
      const float* h = a[j / 2] + 4 * (j % 2);
      out[r * n + j] = h[0] + h[1] + h[2] + h[3] + m[4 + j];
    }
  }
#else
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) out[r * n + j] = 0.f;
  for (int64_t g = 0; g < groups; ++g)
    for (int r = 0; r < R; ++r) {
      const int8_t* p = x[r].p.data() + g * GROUP;
      for (int j = 0; j < 4; ++j) {
        const uint8_t* b = w + g * 64 + j * 16;
        int dot = 0;
        for (int i = 0; i < 16; ++i) dot += (b[i] & 15) * p[i] + (b[i] >> 4) * p[i + 16];
        out[r * n + j] += half_to_float(s[g * 8 + j]) * x[r].dx[g] * dot + half_to_float(s[g * 8 + 4 + j]) * x[r].sx[g];
      }
    }
#endif
}

// The same for int8 weights: w (G, 128) int8, four rows' 32 bytes a group; s (G, 4) fp16.
template <int R>
void q8_rows(const uint8_t* w, const uint16_t* s, const Rows* x, int64_t groups, float* out, int64_t n) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__F16C__)
  const __m512i spread[2] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                             _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)};
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    _mm_prefetch(reinterpret_cast<const char*>(w + g * 128 + AHEAD), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + g * 128 + AHEAD + 64), _MM_HINT_T0);
    const __m512 d4 = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + g * 4))));
    for (int half = 0; half < 2; ++half) {  // rows 0-1, then rows 2-3
      const __m512i b = _mm512_loadu_si512(w + g * 128 + half * 64);
      const __m512i magnitude = _mm512_abs_epi8(b);  // u8 x s8 products: |q| times p with q's sign
      const __mmask64 negative = _mm512_movepi8_mask(b);
      const __m512 d = _mm512_permutexvar_ps(spread[half], d4);
      for (int r = 0; r < R; ++r) {
        const __m512i p = _mm512_broadcast_i64x4(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(x[r].p.data() + g * GROUP)));
        const __m512i dot = _mm512_dpbusd_epi32(zero, magnitude, _mm512_mask_sub_epi8(p, negative, zero, p));
        acc[r][half] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(x[r].dx[g])),
                                       acc[r][half]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int half = 0; half < 2; ++half) {
      alignas(64) float a[16];
      _mm512_store_ps(a, acc[r][half]);
      for (int j = 0; j < 2; ++j) {
        float sum = 0.f;
        for (int i = 0; i < 8; ++i) sum += a[8 * j + i];
        out[r * n + 2 * half + j] = sum;
      }
    }
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    _mm_prefetch(reinterpret_cast<const char*>(w + g * 128 + AHEAD), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + g * 128 + AHEAD + 64), _MM_HINT_T0);
    const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + g * 4)));
    alignas(16) float d[4];
    _mm_store_ps(d, d4);
    for (int j = 0; j < 4; ++j) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + g * 128 + j * 32));
      const __m256i magnitude = _mm256_sign_epi8(b, b);  // |q| (q = -128 never occurs)
      for (int r = 0; r < R; ++r) {
        const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].p.data() + g * GROUP));
        // |q| x p with q's sign: pairs of at most 2 x 127 x 127, within 16 bits
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(p, b)), ones);
        acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d[j] * x[r].dx[g]), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) {
      alignas(32) float a[8];
      _mm256_store_ps(a, acc[r][j]);
      out[r * n + j] = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    }
#else
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) out[r * n + j] = 0.f;
  const int8_t* q = reinterpret_cast<const int8_t*>(w);
  for (int64_t g = 0; g < groups; ++g)
    for (int r = 0; r < R; ++r) {
      const int8_t* p = x[r].p.data() + g * GROUP;
      for (int j = 0; j < 4; ++j) {
        int dot = 0;
        for (int i = 0; i < GROUP; ++i) dot += q[g * 128 + j * 32 + i] * p[i];
        out[r * n + j] += half_to_float(s[g * 4 + j]) * x[r].dx[g] * dot;
      }
    }
#endif
}

// R activation rows, 1 to 4, through Kernel<R> at once.
template <template <int> class Kernel>
void rows_any(int64_t r, const uint8_t* w, const uint16_t* s, const Rows* x, int64_t groups, float* out,
              int64_t n) {
  switch (r) {
    case 1: return Kernel<1>::run(w, s, x, groups, out, n);
    case 2: return Kernel<2>::run(w, s, x, groups, out, n);
    case 3: return Kernel<3>::run(w, s, x, groups, out, n);
    default: return Kernel<4>::run(w, s, x, groups, out, n);
  }
}

template <int R> struct Q4 { static void run(const uint8_t* w, const uint16_t* s, const Rows* x, int64_t g,
                                             float* o, int64_t n) { q4_rows<R>(w, s, x, g, o, n); } };
template <int R> struct Q8 { static void run(const uint8_t* w, const uint16_t* s, const Rows* x, int64_t g,
                                             float* o, int64_t n) { q8_rows<R>(w, s, x, g, o, n); } };

// y = x W^T for weights packed 4 rows at a time, `width` bytes and `per` fp16 scales a group of each 4 rows.
template <template <int> class Kernel>
at::Tensor product(const char* name, const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                   int64_t width, int64_t per, at::ScalarType type) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, name, ": x must be (M, K) float32");
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == width && packed.scalar_type() == type, name,
              ": packed must be (N/4, K/32, ", width, ") ", type);
  TORCH_CHECK(scales.dim() == 3 && scales.size(2) == per && scales.scalar_type() == at::kHalf, name,
              ": scales must be (N/4, K/32, ", per, ") float16");
  const int64_t m = x.size(0), k = x.size(1), groups = packed.size(1), quads = packed.size(0);
  TORCH_CHECK(k == groups * GROUP && scales.size(0) == quads && scales.size(1) == groups, name, ": shapes differ");
  const at::Tensor xc = x.contiguous(), pc = packed.contiguous(), sc = scales.contiguous();
  thread_local std::vector<Rows> kept;  // from call to call: no allocation a token
  kept.resize(std::max<int64_t>(m, kept.size()));
  std::vector<Rows>& rows = kept;  // this thread's, which the workers below read
  for (int64_t i = 0; i < m; ++i) quantize_row(xc.data_ptr<float>() + i * k, k, rows[i]);
  at::Tensor y = at::empty({m, quads * 4}, x.options());
  const uint8_t* w = static_cast<const uint8_t*>(pc.data_ptr());
  const uint16_t* s = reinterpret_cast<const uint16_t*>(sc.data_ptr<at::Half>());
  float* out = y.data_ptr<float>();
  const int64_t n = quads * 4;
  at::parallel_for(0, quads, 16, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q)
      for (int64_t i = 0; i < m; i += 4)
        rows_any<Kernel>(std::min<int64_t>(4, m - i), w + q * groups * width, s + q * groups * per,
                         rows.data() + i, groups, out + i * n + q * 4, n);
  });
  return y;
}

}  // namespace

at::Tensor q4a8_mm(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales) {
  return product<Q4>("q4a8_mm", x, packed, scales, 64, 8, at::kByte);
}

at::Tensor q8a8_mm(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales) {
  return product<Q8>("q8a8_mm", x, packed, scales, 128, 4, at::kChar);
}

const char* path() {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__F16C__)
  return "avx512-vnni";
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
  return "avx2";
#else
  return "c++";
#endif
}

}  // namespace aiayn_kernels
