// Attention over keys and values kept as int8, one float32 scale a group of 32 values (the int8 KV cache,
// model/kv_int8.py): softmax(q k^T / sqrt(D)) v read straight from the int8 rows, never written out as floats.
// The keys are split into chunks of CHUNK positions (flash-decoding's split, so that one row's few heads still
// keep both cores busy); a task takes a row's key/value head, one query and one chunk: for each position the scores
// of the query heads that share the key head, then their softmax's maximum and sum and the weighted values, all in
// float32. The chunks are merged at the end, each weighted by its share of the whole softmax. Plain C++ with
// `omp simd` loops: -march=native vectorises the int8 -> float conversions and the sums on any x86 or other CPU.
#include "quant.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#if defined(__x86_64__) || defined(__i386__)  // x86 alone has them: elsewhere the plain C++ path
#include <immintrin.h>
#endif
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace aiayn_kernels {
namespace {

constexpr int64_t CHUNK = 256;  // key positions a task

// q . k over D values, k's groups of `group` each times its scale
inline float dot(const float* q, const int8_t* k, const float* scale, int64_t d, int64_t group) {
  float total = 0.f;
  for (int64_t g0 = 0; g0 < d; g0 += group) {
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = g0; i < g0 + group; ++i) sum += q[i] * static_cast<float>(k[i]);
    total += sum * scale[g0 / group];
  }
  return total;
}

inline void add_scaled(float* acc, float w, const int8_t* v, const float* scale, int64_t d, int64_t group) {
  for (int64_t g0 = 0; g0 < d; g0 += group) {
    const float ws = w * scale[g0 / group];
#pragma omp simd
    for (int64_t i = g0; i < g0 + group; ++i) acc[i] += ws * static_cast<float>(v[i]);
  }
}

struct Rows {  // a (B, H, S, D) int8 tensor and its (B, H, S, D / group) scales, by their strides
  const int8_t* data;
  const float* scale;
  int64_t sb, sh, ss, cb, ch, cs, group;
  const int8_t* row(int64_t b, int64_t h, int64_t s) const { return data + b * sb + h * sh + s * ss; }
  const float* scales(int64_t b, int64_t h, int64_t s) const { return scale + b * cb + h * ch + s * cs; }
};

Rows rows_of(const at::Tensor& data, const at::Tensor& scale) {
  return {data.data_ptr<int8_t>(), scale.data_ptr<float>(), data.stride(0), data.stride(1), data.stride(2),
          scale.stride(0), scale.stride(1), scale.stride(2), data.size(3) / scale.size(3)};
}

#if defined(__AVX512F__)
constexpr int64_t MOST_GROUPS = 8, MOST_BLOCKS = 16;  // query heads a key head, 16-float blocks a head (D <= 256)

inline __m512 load_int8(const int8_t* p) {  // 16 int8 -> 16 float
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

inline __m512 exp16(__m512 x) {  // e^x for x <= 0 (-inf: 0): 2^n e^r, |r| <= ln2/2, a degree-6 polynomial
  const __m512 low = _mm512_set1_ps(-87.f);
  const __mmask16 gone = _mm512_cmp_ps_mask(x, low, _CMP_LT_OQ);
  x = _mm512_max_ps(x, low);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147181f), x);
  __m512 p = _mm512_set1_ps(1.f / 720);
  for (const float c : {1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_maskz_mov_ps(~gone, _mm512_scalef_ps(p, n));
}

// One task's chunk (positions s0..s1 of key head hk) for its G query heads q[g] (D floats each, D a multiple of
// 16): scores, then each head's maximum, sum and weighted values into out[g] (D + 2 floats).
void chunk_avx512(const float* const* q, int64_t groups, int64_t d, const Rows& keys, const Rows& values, int64_t b,
                  int64_t hk, int64_t s0, int64_t s1, const bool* seen, int64_t ms, float root, float* scores,
                  float* const* out) {
  const int64_t blocks = d / 16, n = s1 - s0;
  const float low = -std::numeric_limits<float>::infinity();
  for (int64_t s = s0; s < s1; ++s) {
    if (seen && !seen[s * ms]) {
      for (int64_t g = 0; g < groups; ++g) scores[g * CHUNK + s - s0] = low;
      continue;
    }
    const int8_t* key = keys.row(b, hk, s);
    const float* scale = keys.scales(b, hk, s);
    __m512 acc[MOST_GROUPS];
    for (int64_t g = 0; g < groups; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < blocks; ++j) {  // each block of 16 times its group's scale, once for every head
      const __m512 k = _mm512_mul_ps(load_int8(key + 16 * j), _mm512_set1_ps(scale[16 * j / keys.group]));
      for (int64_t g = 0; g < groups; ++g) acc[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q[g] + 16 * j), k, acc[g]);
    }
    for (int64_t g = 0; g < groups; ++g) scores[g * CHUNK + s - s0] = _mm512_reduce_add_ps(acc[g]) * root;
  }
  float top[MOST_GROUPS], sum[MOST_GROUPS];
  for (int64_t g = 0; g < groups; ++g) {
    float* sc = scores + g * CHUNK;
    top[g] = *std::max_element(sc, sc + n);
    __m512 total = _mm512_setzero_ps();
    const __m512 shift = _mm512_set1_ps(top[g] == low ? 0.f : top[g]);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {  // the weights e^(score - top), 0 where masked, in place of the scores
      const __m512 w = exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + i), shift));
      _mm512_storeu_ps(sc + i, w);
      total = _mm512_add_ps(total, w);
    }
    sum[g] = _mm512_reduce_add_ps(total);
    for (; i < n; ++i) {
      sc[i] = sc[i] == low ? 0.f : std::exp(sc[i] - top[g]);
      sum[g] += sc[i];
    }
  }
  __m512 acc[MOST_GROUPS][MOST_BLOCKS];
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < blocks; ++j) acc[g][j] = _mm512_setzero_ps();
  for (int64_t s = s0; s < s1; ++s) {
    const int8_t* value = values.row(b, hk, s);
    const float* scale = values.scales(b, hk, s);
    __m512 w[MOST_GROUPS];
    bool any = false;
    for (int64_t g = 0; g < groups; ++g) {
      const float x = scores[g * CHUNK + s - s0];
      any |= x != 0.f;
      w[g] = _mm512_set1_ps(x);
    }
    if (!any) continue;  // masked (its slot may hold anything) or too small to count
    for (int64_t j = 0; j < blocks; ++j) {
      const __m512 v = _mm512_mul_ps(load_int8(value + 16 * j), _mm512_set1_ps(scale[16 * j / values.group]));
      for (int64_t g = 0; g < groups; ++g) acc[g][j] = _mm512_fmadd_ps(w[g], v, acc[g][j]);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    out[g][0] = top[g];
    out[g][1] = top[g] == low ? 0.f : sum[g];
    for (int64_t j = 0; j < blocks; ++j) _mm512_storeu_ps(out[g] + 2 + 16 * j, acc[g][j]);
  }
}
#endif

}  // namespace

at::Tensor int8_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_scale, const at::Tensor& v,
                          const at::Tensor& v_scale, const std::optional<at::Tensor>& mask) {
  TORCH_CHECK(q.dim() == 4 && q.scalar_type() == at::kFloat, "int8_attention: q must be (B, H, T, D) float32");
  TORCH_CHECK(k.dim() == 4 && k.scalar_type() == at::kChar && k.stride(3) == 1 && v.sizes() == k.sizes() &&
                  v.scalar_type() == at::kChar && v.stride(3) == 1,
              "int8_attention: k and v must be (B, H_kv, S, D) int8, D contiguous");
  TORCH_CHECK(k_scale.scalar_type() == at::kFloat && v_scale.scalar_type() == at::kFloat && k_scale.dim() == 4 &&
                  v_scale.sizes() == k_scale.sizes() && k_scale.size(2) == k.size(2) && k_scale.stride(3) == 1 &&
                  v_scale.stride(3) == 1 && k.size(3) % k_scale.size(3) == 0,
              "int8_attention: the scales must be (B, H_kv, S, D / group) float32, one a group of values");
  const int64_t b_n = q.size(0), h_n = q.size(1), t_n = q.size(2), d = q.size(3);
  const int64_t kv_heads = k.size(1), s_n = k.size(2), groups = h_n / kv_heads;
  TORCH_CHECK(k.size(0) == b_n && k.size(3) == d && kv_heads * groups == h_n,
              "int8_attention: k must have q's rows and head size, and a number of heads that divides q's");
  const bool masked = mask.has_value() && mask->defined();
  at::Tensor m;
  if (masked) {
    TORCH_CHECK(mask->scalar_type() == at::kBool && mask->dim() == 3 && mask->size(0) == b_n &&
                    mask->size(1) == t_n && mask->size(2) == s_n,
                "int8_attention: mask must be (B, T, S) bool");
    m = *mask;
  }
  const at::Tensor qc = q.contiguous();
  const Rows keys = rows_of(k, k_scale), values = rows_of(v, v_scale);
  const int64_t chunks = std::max<int64_t>(1, (s_n + CHUNK - 1) / CHUNK);
  // each (row, query head, query, chunk): the chunk's maximum score, its softmax's sum, its weighted values (D)
  at::Tensor parts = at::empty({b_n, h_n, t_n, chunks, d + 2}, q.options());
  float* part = parts.data_ptr<float>();
  const float* qp = qc.data_ptr<float>();
  const bool* mp = masked ? m.data_ptr<bool>() : nullptr;
  const int64_t mb = masked ? m.stride(0) : 0, mt = masked ? m.stride(1) : 0, ms = masked ? m.stride(2) : 0;
  const float root = 1.f / std::sqrt(static_cast<float>(d));
  const float low = -std::numeric_limits<float>::infinity();
  at::parallel_for(0, b_n * kv_heads * t_n * chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(groups * CHUNK);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t c = task % chunks, t = (task / chunks) % t_n, hk = (task / chunks / t_n) % kv_heads;
      const int64_t b = task / chunks / t_n / kv_heads;
      const int64_t s0 = c * CHUNK, s1 = std::min(s_n, s0 + CHUNK), n = s1 - s0;
      const bool* seen = mp ? mp + b * mb + t * mt : nullptr;
#if defined(__AVX512F__)
      if (d % 16 == 0 && keys.group % 16 == 0 && d / 16 <= MOST_BLOCKS && groups <= MOST_GROUPS) {
        const float* qs[MOST_GROUPS];
        float* outs[MOST_GROUPS];
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t h = (b * h_n) + hk * groups + g;
          qs[g] = qp + (h * t_n + t) * d;
          outs[g] = part + ((h * t_n + t) * chunks + c) * (d + 2);
        }
        chunk_avx512(qs, groups, d, keys, values, b, hk, s0, s1, seen, ms, root, scores.data(), outs);
        continue;
      }
#endif
      for (int64_t s = s0; s < s1; ++s) {
        const bool visible = !seen || seen[s * ms];
        const int8_t* key = keys.row(b, hk, s);
        const float* scale = keys.scales(b, hk, s);
        for (int64_t g = 0; g < groups; ++g)
          scores[g * CHUNK + s - s0] =
              visible ? dot(qp + (((b * h_n) + hk * groups + g) * t_n + t) * d, key, scale, d, keys.group) * root
                      : low;
      }
      for (int64_t g = 0; g < groups; ++g) {
        float* out = part + ((((b * h_n) + hk * groups + g) * t_n + t) * chunks + c) * (d + 2);
        const float* sc = scores.data() + g * CHUNK;
        const float top = *std::max_element(sc, sc + n);
        float sum = 0.f;
        std::fill(out + 2, out + 2 + d, 0.f);
        if (top != low) {
          for (int64_t s = s0; s < s1; ++s) {
            if (sc[s - s0] == low) continue;  // masked: never read (its slot may hold anything)
            const float w = std::exp(sc[s - s0] - top);
            sum += w;
            add_scaled(out + 2, w, values.row(b, hk, s), values.scales(b, hk, s), d, values.group);
          }
        }
        out[0] = top;
        out[1] = sum;
      }
    }
  });
  at::Tensor y = at::zeros({b_n, h_n, t_n, d}, q.options());
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, b_n * h_n * t_n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* p = part + i * chunks * (d + 2);
      float top = low;
      for (int64_t c = 0; c < chunks; ++c) top = std::max(top, p[c * (d + 2)]);
      if (top == low) continue;  // nothing visible: zeros, as fast_attention gives a fully masked row
      float total = 0.f;
      for (int64_t c = 0; c < chunks; ++c)
        if (p[c * (d + 2)] != low) total += p[c * (d + 2) + 1] * std::exp(p[c * (d + 2)] - top);
      for (int64_t c = 0; c < chunks; ++c) {
        if (p[c * (d + 2)] == low) continue;
        const float w = std::exp(p[c * (d + 2)] - top) / total;
        const float* acc = p + c * (d + 2) + 2;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) yp[i * d + j] += w * acc[j];
      }
    }
  });
  return y;
}

}  // namespace aiayn_kernels
